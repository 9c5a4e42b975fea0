"""Lead 2: spare worker slots. A 2-worker sync job (PS aggregates 2 gradients per update) whose
ClusterSpec lists SLOTS workers (slots >= 2 are absent: unresolvable DNS names or closed ports).
mode 'legacy': every process boots with the full spec (as TF_CONFIG today), sessions use
device_filters [/job:ps, own task]. mode 'prop': PS boots with {ps:[self]}, workers boot as
job 'local' and pass cluster_def {ps, worker:{i: self}} + share_session_state flag.
usage: lead2.py ps|worker BASEPORT SLOTS MODE [index] [absent=dns|port]
"""
import os, sys, time, json, threading
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
import tensorflow as tf
v1 = tf.compat.v1
v1.disable_eager_execution()
DIM = 16384
role, base, slots, mode = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
idx = int(sys.argv[5]) if len(sys.argv) > 5 else 0
absent = sys.argv[6] if len(sys.argv) > 6 else "dns"
ps_addr = f"127.0.0.1:{base}"
def waddr(i):
    if i < 2:
        return f"127.0.0.1:{base + 1 + i}"
    return f"w{i}.absent.invalid:2222" if absent == "dns" else f"127.0.0.1:{base + 1 + i}"
full = {"ps": [ps_addr], "worker": [waddr(i) for i in range(slots)]}

def build(psdev, wdev):
    with tf.device(psdev), v1.container("ep"):
        w = v1.get_variable("w", initializer=tf.zeros([DIM]), use_resource=True)
        acc = v1.ConditionalAccumulator(tf.float32, shape=[DIM], shared_name="acc")
        toks = [v1.FIFOQueue(-1, tf.int64, shapes=[()], shared_name=f"tok{i}") for i in range(2)]
        gs = v1.get_variable("gs", initializer=tf.constant(0, tf.int64), use_resource=True)
    return w, acc, toks, gs

if role == "ps":
    t0 = time.time()
    spec = full if mode == "legacy" else ({"ps": [ps_addr], "worker": {0: waddr(0)}} if mode == "mixed" else {"ps": [ps_addr]})
    srv = tf.distribute.Server(tf.train.ClusterSpec(spec), job_name="ps", task_index=0, start=True)
    g = tf.Graph()
    with g.as_default():
        w, acc, toks, gs = build("/job:ps/task:0", None)
        with tf.device("/job:ps/task:0"):
            gr = acc.take_grad(2)
            with tf.control_dependencies([w.assign_sub(0.001 * gr)]):
                inc = gs.assign_add(1)
            with tf.control_dependencies([inc]):
                top = tf.group(*[q.enqueue(inc) for q in toks])
            init = tf.group(v1.global_variables_initializer(), *[q.enqueue(tf.constant(0, tf.int64)) for q in toks])
    sess = v1.Session(srv.target, graph=g, config=v1.ConfigProto(device_filters=["/job:ps/task:0"]))
    sess.run(init)
    print(f"PS ready {time.time() - t0:.2f}", flush=True)
    def loop():
        while True:
            sess.run(top)
    threading.Thread(target=loop, daemon=True).start()
    time.sleep(float(os.environ.get("PS_SECONDS", "30")))
    os._exit(0)
else:
    me = waddr(idx)
    dev = f"/job:worker/task:{idx}"
    if mode == "mixed" and idx == 0:   # an old replica: the PS was told about it, no cluster_def
        srv = tf.distribute.Server(tf.train.ClusterSpec({"ps": [ps_addr], "worker": {0: me}}), job_name="worker", task_index=0, start=True)
        cfg = v1.ConfigProto(device_filters=["/job:ps", dev])
    elif mode == "legacy":
        srv = tf.distribute.Server(tf.train.ClusterSpec(full), job_name="worker", task_index=idx, start=True)
        cfg = v1.ConfigProto(device_filters=["/job:ps", dev])
    else:
        srv = tf.distribute.Server(tf.train.ClusterSpec({"local": [me]}), job_name="local", task_index=0, start=True)
        cluster = tf.train.ClusterSpec({"ps": [ps_addr], "worker": {idx: me}})
        cfg = v1.ConfigProto(cluster_def=cluster.as_cluster_def(), device_filters=["/job:ps", dev])
        cfg.experimental.share_session_state_in_clusterspec_propagation = True
    g = tf.Graph()
    with g.as_default():
        w, acc, toks, gs = build("/job:ps/task:0", dev)
        with tf.device(dev):
            x = tf.random.normal([DIM], seed=idx)
            grad = w.read_value() * 0.1 + x
        with tf.device("/job:ps/task:0"):
            step_tok = toks[idx].dequeue()  # tagged with the global step
        with tf.device("/job:ps/task:0"):
            push = acc.apply_grad(grad, local_step=step_tok)
    t0 = time.time()
    sess = v1.Session(srv.target, graph=g, config=cfg)
    n = 0; t_first = None
    dur = float(os.environ.get("W_SECONDS", "8"))
    while True:
        sess.run(push)
        n += 1
        if n == 20:
            t_first = time.time()
        if t_first and time.time() - t_first > dur:
            break
    rate = (n - 20) / (time.time() - t_first)
    print("RESULT", json.dumps({"mode": mode, "slots": slots, "absent": absent, "idx": idx,
                                "session_to_20_steps_s": round(t_first - t0, 2),
                                "steps_per_s": round(rate, 1)}), flush=True)
    os._exit(0)
