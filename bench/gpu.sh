#!/usr/bin/env bash
# GPU figures for docs/benchmarks.md, in one short run (about 5 minutes on one H200):
#   1. SCNN training step, eager float32 vs the fast path, paper (batch 12) and demo (batch 8) recipes
#   2. NCCL all-reduce bus bandwidth across the machine's GPUs (a note when there is only one)
#   3. data-loader items/s per worker process, against the images/s the GPU consumes (from 1)
#   4. inference frames/s at batch 1, paper recipe (the SCNN paper reports 7.5 FPS)
#   5. a short real training with and without CUDA graphs: loss curves and batch-norm statistics agree
#
#   PYTHON=/path/to/python bash bench/gpu.sh [OUT_DIR]
#   SMOKE=1 bash bench/gpu.sh [OUT_DIR]   # every step in miniature on this machine's CPU (~1 min):
#                                         # checks the script before a GPU's time is spent on it
#   STEPS="infer graphs-loss" bash bench/gpu.sh   # only the steps named (names as in the log)
#
# Needs a Python with a CUDA build of torch and dtrain's dependencies (pip install -e '.[lanes]').
# Every step has its own time limit, so one slow part cannot eat the others' time; all JSON lines
# land in OUT_DIR/gpu.jsonl (default $OUT or ./gpu-out), the log in OUT_DIR/gpu.log.
set -uo pipefail
OUT_DIR=$(realpath -m -- "${1:-${OUT:-gpu-out}}")  # relative to where it is run from, before the cd
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
ALL_STEPS="train-paper train-paper-no-graphs train-paper-compile train-demo train-demo-no-graphs train-demo-fp32 nccl loader infer graphs-loss"
for name in ${STEPS:-}; do  # a misspelt name would otherwise run nothing, silently
    if [[ " $ALL_STEPS " != *" $name "* ]]; then
        echo "STEPS names no step '$name': choose from $ALL_STEPS" >&2; exit 2
    fi
done
mkdir -p "$OUT_DIR"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
LOG=$OUT_DIR/gpu.log
JSONL=$OUT_DIR/gpu.jsonl
: > "$JSONL"

step() {  # step LIMIT_S NAME COMMAND...: run with a time limit, keep its JSON lines
    local limit=$1 name=$2; shift 2
    if [ -n "${STEPS:-}" ] && [[ " $STEPS " != *" $name "* ]]; then return; fi
    echo "== $name: $*" | tee -a "$LOG"
    timeout "$limit" "$@" 2>>"$LOG" | tee -a "$LOG" | grep '^{' | sed "s/^{/{\"step\": \"$name\", /" >> "$JSONL"
    echo "== $name: exit ${PIPESTATUS[0]}" | tee -a "$LOG"
}

if [ "${SMOKE:-0}" = 1 ]; then
    # The same steps and flags; later flags win, so each step runs on the CPU at a toy size.
    DEV=cpu NGPU=2 COMPILE=--no-compile
    TRAIN_X=(--size 64x32 --batch 2 --repeats 1 --warmup 1)
    NCCL_X=(--backend gloo --sizes-mb 0.01 --iters 2)
    LOADER_X=(--frames 4 --rounds 1)
    INFER_X=(--recipe tiny --frames 2)
    LOSS_X=(--train 40 --steps 6)
    export OMP_NUM_THREADS=1
    echo "smoke run: CPU, toy sizes; no figure from it is a GPU figure" | tee -a "$LOG"
else
    "$PY" -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'; print(torch.__version__, torch.cuda.get_device_name(0))" \
        | tee -a "$LOG" || { echo "no CUDA torch in $PY: set PYTHON (or SMOKE=1 to check the script on a CPU)" | tee -a "$LOG"; exit 2; }
    nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv | tee -a "$LOG"
    NGPU=$("$PY" -c "import torch; print(torch.cuda.device_count())")
    DEV=cuda COMPILE=--compile TRAIN_X=() NCCL_X=() LOADER_X=() INFER_X=() LOSS_X=()
fi

# 1. training step: the fast path is the recipe's knobs (channels-last, bf16 autocast, fast message
#    passing, CUDA graphs of forward and backward); then each knob's share: the same without graphs,
#    without bf16, and with torch.compile of the backbone and neck on top (compiled in the warm-up).
TRAIN_PAPER=("$PY" bench/lanes_train.py --recipe paper --batch 12 --repeats 10 --warmup 3 --device $DEV)
TRAIN_DEMO=("$PY" bench/lanes_train.py --recipe demo --size 256x144 --batch 8 --repeats 20 --warmup 3 --device $DEV)
step 120 train-paper "${TRAIN_PAPER[@]}" "${TRAIN_X[@]}"
step 120 train-paper-no-graphs "${TRAIN_PAPER[@]}" --no-cuda-graphs "${TRAIN_X[@]}"
step 150 train-paper-compile "${TRAIN_PAPER[@]}" $COMPILE "${TRAIN_X[@]}"
step 90 train-demo "${TRAIN_DEMO[@]}" "${TRAIN_X[@]}"
step 90 train-demo-no-graphs "${TRAIN_DEMO[@]}" --no-cuda-graphs "${TRAIN_X[@]}"
step 90 train-demo-fp32 "${TRAIN_DEMO[@]}" --no-bf16 "${TRAIN_X[@]}"
# 2. all-reduce bus bandwidth
step 90 nccl "$PY" -m torch.distributed.run --standalone --nproc-per-node "$NGPU" bench/nccl_allreduce.py "${NCCL_X[@]}"
# 3. loader: items/s of one worker process (one thread), LaneDataset vs a naive loader
step 90 loader "$PY" bench/lanes_loader.py --frames 200 --rounds 2 "${LOADER_X[@]}"
# 4. inference at batch 1
step 60 infer "$PY" bench/lanes_infer.py --recipe paper --frames 50 --device $DEV "${INFER_X[@]}"

# 5. the same short training with and without CUDA graphs (real data loader, validation at the end
#    runs the eager forward): the loss curves must agree within bf16 noise
step 150 graphs-loss "$PY" bench/lanes_graphs_loss.py --device $DEV "${LOSS_X[@]}"

# Workers needed to feed the GPU: the fast path's images/s over one worker's items/s.
"$PY" - "$JSONL" <<'PYEOF' | tee -a "$LOG" >> "$JSONL"
import json, sys
rows = {r["step"]: r for r in map(json.loads, open(sys.argv[1]))}
train, loader = rows.get("train-paper"), rows.get("loader")
if train and loader:
    gpu_ips = train["batch"] / train["fast_step_s"]
    print(json.dumps({"step": "loader-vs-gpu", "gpu_images_per_s": round(gpu_ips, 1),
                      "worker_items_per_s": loader["lanedataset"],
                      "workers_needed": round(gpu_ips / loader["lanedataset"], 1)}))
PYEOF
echo "figures in $JSONL" | tee -a "$LOG"
