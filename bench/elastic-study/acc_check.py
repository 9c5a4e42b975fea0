import os; os.environ["TF_CPP_MIN_LOG_LEVEL"]="2"
import tensorflow as tf; v1=tf.compat.v1; v1.disable_eager_execution()
acc=v1.ConditionalAccumulator(tf.float32, shape=[1], shared_name="a")
p0=acc.apply_grad([1.0], local_step=0); p5=acc.apply_grad([1.0], local_step=5); t=acc.take_grad(1); n=acc.num_accumulated()
with v1.Session() as s:
    s.run(p0); print("after push0", s.run(n)); s.run(t); s.run(p0); print("after take, push0 again:", s.run(n)); s.run(p5); print("push5", s.run(n))
