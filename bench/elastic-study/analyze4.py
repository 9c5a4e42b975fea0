import json, sys
log = json.load(open(sys.argv[1]))
t0 = log[0]["t"]; prev = None; segs = []
for e in log:
    if "timeout_r" in e:
        print(f"  timeout at {e['t']-t0:.2f}s waiting for r={e['timeout_r']}"); continue
    if prev is None or e["r"] != prev["r"]:
        segs.append([e["r"], e["t"], e["t"], 0, 0.0])
    s = segs[-1]; gap = e["t"] - (prev["t"] if prev else e["t"])
    s[2] = e["t"]; s[3] += 1; s[4] = max(s[4], gap) if prev and prev["r"] == e["r"] else s[4]
    if prev and prev["r"] != e["r"]:
        print(f"  r {prev['r']}->{e['r']} at {e['t']-t0:.2f}s, gap between updates {gap*1000:.0f} ms")
    prev = e
for r, a, b, n, mg in segs:
    print(f"  r={r}: {a-t0:.2f}-{b-t0:.2f}s, {n} updates, {n/max(b-a,1e-9):.0f}/s, max gap {mg*1000:.0f} ms")
gs = [e["gs"] for e in log if "gs" in e]
print("  gs contiguous:", gs == list(range(gs[0], gs[0]+len(gs))), "sum r =", sum(e["r"] for e in log if "gs" in e))
