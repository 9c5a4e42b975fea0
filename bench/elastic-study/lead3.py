"""Lead 3: how long a PS restart takes: process start + TF import + server up, as seen by a
client that already runs (the chief), plus restoring a snapshot (N floats) from client memory.
usage: lead3.py client PORT REPS | lead3.py ps PORT
"""
import os, sys, time, json, subprocess
t_proc = time.time()
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
if sys.argv[1] == "ps":
    import tensorflow as tf
    t_imp = time.time()
    port = int(sys.argv[2])
    srv = tf.distribute.Server(tf.train.ClusterSpec({"ps": [f"127.0.0.1:{port}"]}), job_name="ps",
                               task_index=0, start=True)
    print(json.dumps({"import_s": round(t_imp - t_proc, 2), "server_s": round(time.time() - t_imp, 2),
                      "t_up": time.time()}), flush=True)
    time.sleep(60)
    sys.exit(0)
import numpy as np
import tensorflow as tf
v1 = tf.compat.v1
v1.disable_eager_execution()
port, reps = int(sys.argv[2]), int(sys.argv[3])
N = int(os.environ.get("SNAP_FLOATS", str(1 << 20)))
me = f"127.0.0.1:{port + 50}"
srv = tf.distribute.Server(tf.train.ClusterSpec({"local": [me]}), job_name="local", task_index=0, start=True)
cluster = tf.train.ClusterSpec({"ps": [f"127.0.0.1:{port}"], "chief": [me]})
cfg = v1.ConfigProto(cluster_def=cluster.as_cluster_def(), device_filters=["/job:ps", "/job:chief/task:0"])
cfg.experimental.share_session_state_in_clusterspec_propagation = True
g = tf.Graph()
with g.as_default():
    with tf.device("/job:ps/task:0"):
        v = v1.get_variable("v", shape=[N], use_resource=True)
        ph = v1.placeholder(tf.float32, [N])
        restore = v.assign(ph)
        check = tf.reduce_sum(v)
        ping = tf.constant(1) + 1
snap = np.random.rand(N).astype(np.float32)
results = []
for r in range(reps):
    t0 = time.time()
    p = subprocess.Popen(["nice", "-n", "10", sys.executable, __file__, "ps", str(port)],
                         stdout=subprocess.PIPE, text=True)
    sess = None
    while True:
        try:
            if sess is None:
                sess = v1.Session(srv.target, graph=g, config=cfg)
            sess.run(ping, options=v1.RunOptions(timeout_in_ms=1000))
            break
        except Exception as e:
            if sess is not None:
                sess.close(); sess = None
            time.sleep(0.05)
    t_ping = time.time()
    sess.run(restore, feed_dict={ph: snap})
    t_rest = time.time()
    ok = abs(sess.run(check) - float(snap.sum())) < 1e-2 * N
    info = json.loads(p.stdout.readline())
    res = {"rep": r, "process_to_import_done_s": info["import_s"], "server_start_s": info["server_s"],
           "spawn_to_server_up_s": round(info["t_up"] - t0, 2), "spawn_to_first_op_s": round(t_ping - t0, 2),
           "restore_s": round(t_rest - t_ping, 3), "restore_mb": round(N * 4 / 1e6, 1), "ok": bool(ok)}
    print("RESULT", json.dumps(res), flush=True)
    sess.close()
    p.kill(); p.wait()
    time.sleep(1)
os._exit(0)
