#!/bin/bash
# usage: run4.sh BASE : PS + w0,w1 from the start; w2 joins at ~8 s; SIGTERM w2 at ~16 s, w1 at ~22 s; end ~28 s
cd "$(dirname "$0")"; mkdir -p logs; PY="$(git rev-parse --show-toplevel)/.venv/bin/python"; B=$1; L=logs/l4_$B
nice -n 10 $PY lead4.py ps $B 42 > ${L}_ps.log 2>&1 & P=$!
for i in $(seq 80); do grep -q "PS ready" ${L}_ps.log && break; sleep 0.5; done
T0=$(date +%s.%N)
nice -n 10 $PY lead4.py worker $B 0 > ${L}_w0.log 2>&1 & W0=$!
nice -n 10 $PY lead4.py worker $B 1 > ${L}_w1.log 2>&1 & W1=$!
sleep 5; nice -n 10 $PY lead4.py worker $B 2 > ${L}_w2.log 2>&1 & W2=$!
sleep 20; kill -TERM $W2
sleep 6; kill -TERM $W1
wait $W1 $W2
wait $P
kill -TERM $W0 2>/dev/null; sleep 1; kill -9 $W0 2>/dev/null; wait $W0 2>/dev/null
grep -h RESULT ${L}_w*.log
grep -h "PS done" ${L}_ps.log || tail -3 ${L}_ps.log
