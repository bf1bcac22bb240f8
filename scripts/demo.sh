#!/usr/bin/env bash
# dtrain's main job: the Run:AI + NetApp lane-detection walk-through, end to end, on the local
# backend, through the public `dtrain` CLI only. `make demo` runs it after `make setup`.
#
#   DEMO_RECIPE=demo|tiny   training recipe (tiny: the short CI variant)
#   DEMO_OUT=DIR            where everything goes (default ./demo-out); re-running replaces it
#
# Every command a user would type is printed with a leading '$' before it runs; the README
# walks through the same commands.
set -euo pipefail

RECIPE=${DEMO_RECIPE:-demo}
OUT=$(mkdir -p "${DEMO_OUT:-$PWD/demo-out}" && cd "${DEMO_OUT:-$PWD/demo-out}" && pwd)
case "$RECIPE" in
  tiny) TRAIN_FRAMES=${TRAIN_FRAMES:-120}; TEST_FRAMES=${TEST_FRAMES:-40}; BATCH_SIZE=4; RETRAIN_STEPS=4; SCALING_STEPS=10; SCALING_REPEATS=1 ;;
  *)    TRAIN_FRAMES=${TRAIN_FRAMES:-4000}; TEST_FRAMES=${TEST_FRAMES:-200}; BATCH_SIZE=8; RETRAIN_STEPS=20; SCALING_STEPS=40; SCALING_REPEATS=3 ;;
esac
export DTRAIN_HOME="$OUT/dtrain-home"
START=$(date +%s)

run() { printf '\n$ %s\n' "$*"; "$@"; }
json() { python -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
section() { printf '\n==== %s ====\n' "$*"; }

# Re-running is safe: stop the jobs of an earlier run and start from a clean state folder.
if [ -d "$DTRAIN_HOME" ]; then
  for job in $(dtrain list -A --json | json '" ".join(j["name"] for j in d if j["status"] in ("Pending","Running"))'); do
    dtrain delete "$job" >/dev/null
  done
  rm -rf "$DTRAIN_HOME"
fi
rm -rf "$OUT/report" "$OUT/scaling"
mkdir -p "$OUT/report"

section "0. A TuSimple-format dataset, served over HTTP like the real download"
# TuSimple cannot be downloaded here: generate archives in its exact format (cached between runs).
SYNTH="$OUT/tusimple-archives/$RECIPE-$TRAIN_FRAMES-$TEST_FRAMES"
if [ ! -f "$SYNTH/test_set.tar.gz" ]; then
  rm -rf "$SYNTH"
  run dtrain lanes synth --out "$SYNTH" --train "$TRAIN_FRAMES" --test "$TEST_FRAMES" --seed 2026 --archive
fi
mkdir -p "$OUT/www"
cp "$SYNTH/train_set.tar.gz" "$SYNTH/test_set.tar.gz" "$SYNTH/test_label.json" "$OUT/www/"
PORT=$(python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
python -m http.server --bind 127.0.0.1 --directory "$OUT/www" "$PORT" >"$OUT/http.log" 2>&1 &
HTTP_PID=$!
trap 'kill $HTTP_PID 2>/dev/null || true' EXIT
for _ in $(seq 50); do python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$PORT/')" 2>/dev/null && break; sleep 0.1; done
URL=http://127.0.0.1:$PORT
SHA_TRAIN=$(sha256sum "$OUT/www/train_set.tar.gz" | cut -d' ' -f1)
SHA_TEST=$(sha256sum "$OUT/www/test_set.tar.gz" | cut -d' ' -f1)
SHA_LABELS=$(sha256sum "$OUT/www/test_label.json" | cut -d' ' -f1)

section "1. A project and the data job on a new volume"
run dtrain project create lane-detection
run dtrain config project lane-detection
run dtrain submit download-tusimple-data --pvc local:100Gi:/mnt -- \
  dtrain lanes prepare --url "$URL/train_set.tar.gz" --sha256 "$SHA_TRAIN" \
  --url "$URL/test_set.tar.gz" --sha256 "$SHA_TEST" --url "$URL/test_label.json" --sha256 "$SHA_LABELS" \
  --out /mnt/tusimple
run dtrain logs download-tusimple-data -f
run dtrain wait download-tusimple-data
run dtrain snapshot create pvc-download-tusimple-data-0 --name tusimple-prepared --job download-tusimple-data

section "2. Distributed SCNN training, snapshot on success"
run dtrain submit-dist train-lane-detection --processes 2 --cpu 1 --large-shm \
  --pvc pvc-download-tusimple-data-0:/mnt \
  -e BATCH_SIZE=$BATCH_SIZE -e USE_WORKERS=true -e NUM_WORKERS=1 -e USE_VAL=true -e VAL_BATCH_SIZE=8 \
  -e ENABLE_SNAPSHOT=true -e PVC_NAME=pvc-download-tusimple-data-0 -- \
  python -m dtrain.workloads.lanes train --recipe "$RECIPE" --data-dir /mnt/tusimple --out-dir /mnt/runs/lanes
run dtrain list jobs
run dtrain logs train-lane-detection -f -t 10
run dtrain wait train-lane-detection
run dtrain list jobs
run dtrain nodes

section "3. The snapshot linked to the job; restore it and retrain from it"
run dtrain describe job train-lane-detection
SNAP=$(dtrain describe job train-lane-detection --json | json 'd["snapshot"]')
run dtrain snapshot list
run dtrain snapshot describe "$SNAP"
run dtrain snapshot restore "$SNAP" --to restored-tusimple
RESTORED=$(dtrain volume describe restored-tusimple --json | json 'd["extra"]["path"]')
STEPS=$(json 'd["max_steps"]' <"$RESTORED/runs/lanes/run.json")
run dtrain submit-dist retrain-lane-detection --processes 2 --cpu 1 --large-shm --pvc restored-tusimple:/mnt \
  -e BATCH_SIZE=$BATCH_SIZE -e USE_VAL=false -- \
  python -m dtrain.workloads.lanes train --recipe "$RECIPE" --data-dir /mnt/tusimple --out-dir /mnt/runs/lanes \
  --max-steps $((STEPS + RETRAIN_STEPS))
run dtrain wait retrain-lane-detection
run dtrain logs retrain-lane-detection -t 6

section "4. Evaluation with the official TuSimple metric, overlays, scaling"
run dtrain submit predict-lanes --pvc restored-tusimple:/mnt -- \
  dtrain lanes predict --checkpoint /mnt/runs/lanes/model.pt --data-dir /mnt/tusimple --split test \
  --out /mnt/eval/pred.json --overlays /mnt/eval/overlays --max-overlays 12
run dtrain wait predict-lanes
run dtrain lanes evaluate --pred "$RESTORED/eval/pred.json" --gt "$RESTORED/tusimple/test_label.json"
dtrain lanes evaluate --pred "$RESTORED/eval/pred.json" --gt "$RESTORED/tusimple/test_label.json" --json \
  >"$OUT/report/evaluation.json"
run dtrain bench scaling --workload lanes --processes 1,2 --data-dir "$RESTORED/tusimple" --out "$OUT/scaling" \
  --batch "$BATCH_SIZE" --steps "$SCALING_STEPS" --repeats "$SCALING_REPEATS" -- --recipe "$RECIPE"
run dtrain list jobs

section "5. Summary"
cp -r "$RESTORED/eval/overlays" "$OUT/report/overlays"
cp "$RESTORED/runs/lanes/metrics.jsonl" "$RESTORED/runs/lanes/run.json" "$OUT/report/"
cp "$OUT/scaling/scaling.md" "$OUT/scaling/scaling.png" "$OUT/report/"
dtrain snapshot list --json >"$OUT/report/snapshots.json"
ACC=$(json '"accuracy %.4f, FP %.4f, FN %.4f on %d held-out frames" % (d["accuracy"], d["fp"], d["fn"], d["frames"])' \
      <"$OUT/report/evaluation.json")
cat <<EOF

dtrain demo ($RECIPE recipe) finished in $(( $(date +%s) - START )) s.
  evaluation   $ACC  ($OUT/report/evaluation.json)
  overlays     $OUT/report/overlays/ ($(ls "$OUT/report/overlays" | wc -l) PNG images)
  scaling      $OUT/report/scaling.md and scaling.png
  training     $OUT/report/metrics.jsonl, run.json
  snapshots    $SNAP (data + model + logs of train-lane-detection), tusimple-prepared; see 'dtrain snapshot list'
  state        DTRAIN_HOME=$DTRAIN_HOME (export it to look around with dtrain list / describe / logs)
EOF
