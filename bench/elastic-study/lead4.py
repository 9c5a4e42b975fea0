"""Elastic scale-up/down demo on ClusterSpec propagation (all replicas propagated, PS lists itself).
PS: coordinator (legacy session): take_grad(r) -> apply -> gs+=1, then top up one token (= gs) to each
replica whose mask bit is set; r for the next take = number of tokens given. Logs every update.
worker i: boots as job 'local', session cluster_def {ps, worker:{i: me}} + share flag, sets mask[i]=1,
then token -> grad -> push. On SIGTERM: clear mask[i], drain the tokens it was still given, exit.
usage: lead4.py ps BASE SECONDS | lead4.py worker BASE i
"""
import os, sys, time, json, signal, threading
T_PROC = time.time()
STOP = threading.Event()
signal.signal(signal.SIGTERM, lambda *a: STOP.set())   # before the TF import: a SIGTERM during start-up
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
import tensorflow as tf
v1 = tf.compat.v1
v1.disable_eager_execution()
MAXW, DIM = 8, 16384
role, base = sys.argv[1], int(sys.argv[2])
ps_addr = f"127.0.0.1:{base}"
PSDEV = "/job:ps/task:0"

def state():
    with tf.device(PSDEV), v1.container("ep"):
        w = v1.get_variable("w", initializer=tf.zeros([DIM]), use_resource=True)
        gs = v1.get_variable("gs", initializer=tf.constant(0, tf.int64), use_resource=True)
        mask = v1.get_variable("mask", initializer=tf.zeros([MAXW], tf.int32), use_resource=True)
        acc = v1.ConditionalAccumulator(tf.float32, shape=[DIM], shared_name="acc")
        toks = [v1.FIFOQueue(-1, tf.int64, shapes=[()], shared_name=f"tok{i}") for i in range(MAXW)]
    return w, gs, mask, acc, toks

if role == "ps":
    secs = float(sys.argv[3])
    srv = tf.distribute.Server(tf.train.ClusterSpec({"ps": [ps_addr]}), job_name="ps", task_index=0, start=True)
    g = tf.Graph()
    with g.as_default():
        w, gs, mask, acc, toks = state()
        with tf.device(PSDEV):
            r_ph = v1.placeholder(tf.int32, [])
            gr = acc.take_grad(r_ph)
            with tf.control_dependencies([w.assign_sub(1e-3 * gr)]):
                upd = gs.assign_add(1)
            gsv = gs.read_value(); maskv = mask.read_value()
            enq = [q.enqueue(gsv) for q in toks]
            init = v1.global_variables_initializer()
    sess = v1.Session(srv.target, graph=g, config=v1.ConfigProto(device_filters=[PSDEV]))
    sess.run(init)
    print("PS ready", flush=True)
    log = []
    t_end = time.time() + secs
    r = 0
    while time.time() < t_end:
        if r > 0:
            try:
                k = sess.run(upd, {r_ph: r}, options=v1.RunOptions(timeout_in_ms=2000))
            except tf.errors.DeadlineExceededError:
                log.append({"t": time.time(), "timeout_r": r}); continue
            log.append({"t": time.time(), "gs": int(k), "r": r})
        m = sess.run(maskv)
        active = [i for i in range(MAXW) if m[i]]
        if active:
            sess.run([enq[i] for i in active])
        else:
            time.sleep(0.01)
        r = len(active)
    json.dump(log, open(f"logs/l4_ps_{base}.json", "w"))
    print("PS done updates", len(log), flush=True)
    os._exit(0)
else:
    i = int(sys.argv[3])
    me = f"127.0.0.1:{base + 1 + i}"
    dev = f"/job:worker/task:{i}"
    t0 = time.time()
    print("worker", i, "TF imported", round(t0 - T_PROC, 2), flush=True)
    srv = tf.distribute.Server(tf.train.ClusterSpec({"local": [me]}), job_name="local", task_index=0, start=True)
    cfg = v1.ConfigProto(cluster_def=tf.train.ClusterSpec({"ps": [ps_addr], "worker": {i: me}}).as_cluster_def(),
                         device_filters=["/job:ps", dev])
    cfg.experimental.share_session_state_in_clusterspec_propagation = True
    g = tf.Graph()
    with g.as_default():
        w, gs, mask, acc, toks = state()
        with tf.device(PSDEV):
            tok = toks[i].dequeue()
            qsize = toks[i].size()
            join = v1.scatter_update(mask, [i], [1]) if False else mask.scatter_update(tf.IndexedSlices(tf.constant([1]), tf.constant([i])))
            leave = mask.scatter_update(tf.IndexedSlices(tf.constant([0]), tf.constant([i])))
            gsv = gs.read_value()
        with tf.device(dev):
            grad = w.read_value() * 0.01 + tf.random.normal([DIM])
        with tf.device(PSDEV):
            push = acc.apply_grad(grad, local_step=tok)
    sess = v1.Session(srv.target, graph=g, config=cfg)
    stop = STOP
    if stop.is_set():
        print("RESULT", json.dumps({"worker": i, "terminated_before_join": True}), flush=True); os._exit(0)
    print("worker", i, "session ready", round(time.time() - t0, 2), flush=True)
    sess.run(join)
    t_join = time.time()
    pushes = 0
    while not stop.is_set():
        # no run timeout here: a run cancelled after its dequeue would lose the token (see REPORT)
        sess.run(push); pushes += 1
    t_term = time.time()
    sess.run(leave)
    clear_gs = int(sess.run(gsv))
    drained = 0
    while True:
        if sess.run(qsize) > 0:
            sess.run(push); pushes += 1; drained += 1
        elif sess.run(gsv) >= clear_gs + 2:
            break
        else:
            time.sleep(0.005)
    print("RESULT", json.dumps({"worker": i, "start_to_join_s": round(t_join - t0, 2), "pushes": pushes,
                                "drained_after_sigterm": drained, "leave_s": round(time.time() - t_term, 3),
                                "t_join": t_join, "t_term": t_term}), flush=True)
    os._exit(0)
