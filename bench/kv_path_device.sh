#!/bin/bash
# The KV-path probe's roles (python -m kvpath.probe) on a GPU server, as pods would run them:
# the NIXL version rule, NIXL READs with the seed's descriptors (149 blocks x 28 layers x 64 KiB)
# and 1..8 in flight, and vLLM's copy ops with 1/2/4 processes at 1 and 16 torch threads.
# Needs python3 with numpy and torch (CUDA), nixl-cu13 (or -cu12) 1.5.1 importable, this
# project's kvpath on PYTHONPATH, and OUT set to a folder for the JSON files. docs/kv-path.md
# has what it measured on an NVIDIA H200 server.
set -u
S="--blocks 149 --layers 28 --block-bytes 65536"
export UCX_RNDV_THRESH=inf
{ nproc; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; free -g | head -2;
  python3 -c 'import torch; print("torch", torch.__version__, torch.cuda.get_device_name(0))'; } > $OUT/machine.txt 2>&1
# 1. The version rule: NIXL 1.5.1 with UCX_TLS=tcp,self on a GPU host.
UCX_TLS=tcp,self timeout 60 python3 -m kvpath.probe --role target --port 0 --bind 127.0.0.1 --blocks 1 --layers 1 --block-bytes 65536 --max-in-flight 1 --timeout-s 5 > $OUT/rule_tcp_self.txt 2>&1; echo "exit $?" >> $OUT/rule_tcp_self.txt
# 2. NIXL READs, the seed's descriptors, tcp + cuda_copy (accepted), 1..8 in flight.
export UCX_TLS=tcp,self,cuda_copy
python3 -m kvpath.probe --role target --port 0 --bind 127.0.0.1 $S --max-in-flight 8 --timeout-s 400 > /tmp/target.out 2>&1 &
T=$!
for i in $(seq 60); do grep -q READY /tmp/target.out && break; sleep 1; done
P=$(awk '/^READY/{print $2}' /tmp/target.out)
timeout 400 python3 -m kvpath.probe --role initiator --peer 127.0.0.1:$P $S --max-in-flight 8 --repeats 3 --out $OUT/nixl.json > $OUT/initiator.log 2>&1
kill $T 2>/dev/null; wait $T 2>/dev/null
# 3. vLLM's copy ops, 1/2/4 processes, one torch thread (vLLM serving) and 16 (torch default).
OMP_NUM_THREADS=1 timeout 300 python3 -m kvpath.probe --role copies $S --max-workers 4 --out $OUT/copies_t1.json > $OUT/copies_t1.log 2>&1
OMP_NUM_THREADS=16 timeout 300 python3 -m kvpath.probe --role copies $S --max-workers 4 --out $OUT/copies_t16.json > $OUT/copies_t16.log 2>&1
ls -la $OUT
