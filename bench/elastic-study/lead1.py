"""Lead 1: ClusterSpec propagation with shared PS resources.

roles:
  ps   <port> <bootjob>     : server booted as {bootjob: {0: 127.0.0.1:port}} only; a *legacy*
                             session (no cluster_def) creates ref var w, resource var r,
                             a ConditionalAccumulator 'acc' and FIFOQueue 'tok' (shared_name,
                             container 'ep1'), then loops: take_grad(1) -> w -= g, r += 1, enqueue token.
  worker <port> <psport> <psjob> <mode> : new worker booted as {worker:{5:...}} (or local), session
                             with cluster_def {psjob:[ps], worker:{5:me}}; pushes grad computed on itself
                             into 'acc' on the PS, dequeues token; reports.
"""
import os, sys, time, json
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
import tensorflow as tf
v1 = tf.compat.v1
v1.disable_eager_execution()

def ps(port, bootjob, mode):
    addr = f"127.0.0.1:{port}"
    srv = tf.distribute.Server(tf.train.ClusterSpec({bootjob: {0: addr}}), job_name=bootjob,
                               task_index=0, start=True)
    dev = f"/job:{bootjob}/task:0"
    g = tf.Graph()
    with g.as_default(), tf.device(dev), v1.container("ep1"):
        w = v1.get_variable("w", initializer=tf.zeros([4]), use_resource=False)
        r = v1.get_variable("r", initializer=tf.constant(0, tf.int64), use_resource=True)
        acc = v1.ConditionalAccumulator(tf.float32, shape=[4], shared_name="acc")
        q = v1.FIFOQueue(-1, tf.int32, shapes=[()], shared_name="tok")
        g_ = acc.take_grad(1)
        with tf.control_dependencies([g_]):
            upd = tf.group(v1.assign_sub(w, g_), r.assign_add(1))
        nacc = acc.num_accumulated()
        with tf.control_dependencies([upd]):
            tok = q.enqueue(tf.constant(1))
        init = v1.global_variables_initializer()
        rv = r.read_value()
    cfg = v1.ConfigProto(device_filters=[dev])
    if mode == "legacyprop":   # PS's own session also propagated
        pass
    sess = v1.Session(srv.target, graph=g, config=cfg)
    sess.run(init)
    print("PS ready", flush=True)
    import threading
    cnt = [0]
    def loop():
        while True:
            sess.run(tok); cnt[0] += 1
    threading.Thread(target=loop, daemon=True).start()
    time.sleep(float(os.environ.get("PS_SECONDS", "25")))
    print("PS updates", cnt[0], "r", sess.run(rv), "nacc", sess.run(nacc), flush=True)
    os._exit(0)

def worker(port, psport, psjob, mode):
    me = f"127.0.0.1:{port}"
    boot = os.environ.get("WBOOT", "worker")
    srv = tf.distribute.Server(tf.train.ClusterSpec({boot: {5 if boot == "worker" else 0: me}}),
                               job_name=boot, task_index=5 if boot == "worker" else 0, start=True)
    cluster = tf.train.ClusterSpec({psjob: {0: f"127.0.0.1:{psport}"}, "worker": {5: me}})
    cfg = v1.ConfigProto(cluster_def=cluster.as_cluster_def(),
                         device_filters=[f"/job:{psjob}", "/job:worker/task:5"])
    if "share" in mode:
        cfg.experimental.share_session_state_in_clusterspec_propagation = True
    if "iso" in mode:
        cfg.isolate_session_state = True
    if "devs" in mode:
        cfg.share_cluster_devices_in_session = True
    psdev = f"/job:{psjob}/task:0"
    g = tf.Graph()
    with g.as_default():
        with tf.device(psdev), v1.container("ep1"):
            w = v1.get_variable("w", shape=[4], use_resource=False)
            r = v1.get_variable("r", shape=[], dtype=tf.int64, use_resource=True)
            acc = v1.ConditionalAccumulator(tf.float32, shape=[4], shared_name="acc")
            q = v1.FIFOQueue(-1, tf.int32, shapes=[()], shared_name="tok")
            step = acc.num_accumulated()
        with tf.device(psdev if "gradonps" in mode else "/job:worker/task:5"):
            grad = tf.identity(w.read_value()) * 0.0 + tf.constant([1.0, 2, 3, 4]) * 0.01
        with tf.device(psdev):
            push = acc.apply_grad(grad, local_step=1 << 40)
            if "assign" in mode:
                push = v1.assign_add(w, grad)
            with tf.control_dependencies([push]):
                take = q.dequeue()
        rv = r.read_value()
    res = {"mode": mode, "psjob": psjob}
    t0 = time.time()
    try:
        sess = v1.Session(f"grpc://{me}", graph=g, config=cfg)
        res["w0"] = sess.run(w).tolist()
        res["r0"] = int(sess.run(rv))
        res["session_s"] = round(time.time() - t0, 3)
        sess.run(push, options=v1.RunOptions(timeout_in_ms=3000))
        res["after_push_nacc"] = int(sess.run(step)); res["after_push_w"] = sess.run(w).tolist()
        time.sleep(1)
        res["after_1s_nacc"] = int(sess.run(step)); res["after_1s_q"] = int(sess.run(q.size())); res["after_1s_r"] = int(sess.run(rv))
        t1 = time.time(); n = 0
        while time.time() - t1 < 3:
            try:
                sess.run(take, options=v1.RunOptions(timeout_in_ms=3000)); n += 1
            except tf.errors.DeadlineExceededError:
                res["num_acc_seen_by_worker"] = int(sess.run(step)); res["qsize_worker"] = int(sess.run(q.size()))
                raise
        res["steps_per_s"] = round(n / (time.time() - t1), 1)
        res["w1"] = sess.run(w).tolist(); res["r1"] = int(sess.run(rv))
        res["result"] = "OK"
    except Exception as e:
        msg=[l for l in str(e).splitlines() if l.strip() and not l.startswith(("  File","Graph execution","Detected at","Traceback"," "))]
        res["result"] = f"{type(e).__name__}: {(msg[0] if msg else str(e))[:400]}"
    print("RESULT", json.dumps(res), flush=True)

if __name__ == "__main__":
    role = sys.argv[1]
    if role == "ps":
        ps(int(sys.argv[2]), sys.argv[3], sys.argv[4] if len(sys.argv) > 4 else "")
    else:
        worker(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5])
