"""Lead 1b: PS-side cost of propagated sessions: PS RSS after N sessions left open (a worker that
dies without closing its session leaves its WorkerSession on the PS) vs N sessions closed.
usage: lead1b.py ps PORT | lead1b.py client PORT N close|keep
"""
import os, sys, time, json
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
import tensorflow as tf
v1 = tf.compat.v1
v1.disable_eager_execution()
port = int(sys.argv[2]); ps_addr = f"127.0.0.1:{port}"
def build(dev):
    with tf.device("/job:ps/task:0"):
        w = v1.get_variable("w", initializer=tf.zeros([16384]), use_resource=True)
    with tf.device(dev):
        gr = w.read_value() + 1.0
    with tf.device("/job:ps/task:0"):
        step = w.assign_sub(1e-3 * gr)
    return w, step
if sys.argv[1] == "ps":
    srv = tf.distribute.Server(tf.train.ClusterSpec({"ps": [ps_addr]}), job_name="ps", task_index=0, start=True)
    g = tf.Graph()
    with g.as_default():
        w, _ = build("/job:ps/task:0"); init = v1.global_variables_initializer()
    v1.Session(srv.target, graph=g).run(init)
    print("PS ready", os.getpid(), flush=True)
    time.sleep(120); os._exit(0)
n, how = int(sys.argv[3]), sys.argv[4]
pspid = int(sys.argv[5])
me = f"127.0.0.1:{port + 1}"
srv = tf.distribute.Server(tf.train.ClusterSpec({"local": [me]}), job_name="local", task_index=0, start=True)
def rss(pid):
    return int([l for l in open(f"/proc/{pid}/status") if l.startswith("VmRSS")][0].split()[1]) // 1024
keep = []
g = tf.Graph()
with g.as_default():
    w, step = build("/job:worker/task:3")
r0 = rss(pspid); t0 = time.time()
for k in range(n):
    cfg = v1.ConfigProto(cluster_def=tf.train.ClusterSpec({"ps": [ps_addr], "worker": {3: me}}).as_cluster_def(),
                         device_filters=["/job:ps", "/job:worker/task:3"])
    cfg.experimental.share_session_state_in_clusterspec_propagation = True
    s = v1.Session(srv.target, graph=g, config=cfg)
    s.run(step)
    if how == "close":
        s.close()
    else:
        keep.append(s)
el = time.time() - t0
time.sleep(1)
print("RESULT", json.dumps({"how": how, "sessions": n, "ps_rss_before_mb": r0, "ps_rss_after_mb": rss(pspid),
                            "per_session_ms": round(1000 * el / n, 1)}), flush=True)
os._exit(0)
