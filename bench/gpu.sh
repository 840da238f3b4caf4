#!/usr/bin/env bash
# The GPU benchmark (bench/gpu.py) on the GPU machine, from the project's root, after the
# onnxruntime-gpu parts were copied to /tmp/g (../shared/gpu/README.md, steps 1-2):
#
#   bash bench/gpu.sh export    # export + certify the shipped translator (fp32, fp16): ~3 min
#   bash bench/gpu.sh engine    # machine + engine level (time-boxed to 330 s): ~6.5 min
#   bash bench/gpu.sh load      # machine + service level, the engine level's results kept: ~3 min
#   bash bench/gpu.sh fronts    # the service level with 4 front processes (into $out/fronts): ~3 min
#   bash bench/gpu.sh all       # everything in one command: ~12 min, over one command's 10
#   BENCH_GPU_GRAPHS=traced bash bench/gpu.sh export  # the graphs traced by torch.export instead
#   bash bench/gpu.sh static    # gpu tests of the fixed-capacity step + bench.static_step: ~5 min
#   bash bench/gpu.sh inplace   # after export: gpu tests, then the served batch, cache in place, growing and static with CUDA graphs (fp16): ~6 min
#   bash bench/gpu.sh scaling   # after export: the CPU server, 1 and 16 workers, 1 and 4 fronts (bench.scaling): ~5 min
#   bash bench/gpu.sh pending   # what no GPU run has measured yet, in one command: ~8 min (below)
#   bash bench/gpu.sh goals-engine  # the goals table, first half: quick export + engine level: ~5 min
#   bash bench/gpu.sh goals-serve   # then its second half: the CUDA and CPU servers: ~4 min
#   bash bench/gpu.sh workers   # quick export, the CUDA server with 1, 2 and its default workers: ~4 min
#   bash bench/gpu.sh goals     # both halves cut to one command (~9 min): greedy engine, CUDA server, loops
#   bash bench/gpu.sh steady    # quick export, 3 threaded servers and 1 inline in a row, logs kept: ~6 min
#   bash bench/gpu.sh step      # after goals: the CUDA server with the step inline and on its thread: ~2 min
#   bash bench/gpu.sh admission # quick export, the inline server with the encoder on its thread, inline, 8 fronts: ~5 min
#   bash bench/gpu.sh next      # quick export, six servers in a row (default x3, step thread, 8 ahead, 8 fronts) at 1 and 256 clients: ~8.5 min at most
#   bash bench/gpu.sh ahead     # quick export, the steps run ahead: one worker in process, then the server; 1, 8 in 2 ms runs, 8 unbounded: ~7 min
#   bash bench/gpu.sh families  # Hugging Face families made elsewhere (.gpu/made), served in fp16 on CUDA: ~3 min
#   bash bench/gpu.sh controls  # the translator's gpu tests: decoding controls and scoring on CUDA, ~5 min
#   bash bench/gpu.sh controls-cost  # quick export, then bench.controls at 256 rows (fp16): ~4 min
#
# Carry: .gpu/tools, service/wire (generated gRPC code), data/translator/test.es and
# data/translator/test.en (ignored files). The phases share /tmp/attnserve-gpu (the export,
# each section's results), so run them back to back on the same warm machine; each writes the
# report so far to $OUT/gpu/benchmarks-gpu.{json,md}, the last one the whole of it.
set -euo pipefail
phase=${1:-all}
out=${OUT:-bench-gpu-out}/gpu
work=${BENCH_GPU_WORKDIR:-/tmp/attnserve-gpu}
# shellcheck disable=SC1091
source .gpu/tools/on-device.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
graphs=${BENCH_GPU_GRAPHS:-built}  # how the export makes the graphs: built or traced
run() { python3 -m bench.gpu --device cuda --workdir "$work" --out "$out" --graphs "$graphs" "$@"; }
case "$phase" in
  controls)  # the gpu-marked tests of the translator's paths: decoding controls on the CUDA
    # engine's search graph and static step against its own logits searched in numpy, the
    # static batch, GQA, fp16 parity (the onnxruntime package's Python tools, which the
    # parts leave out, from .gpu/extra; sentencex for Python 3.12 from .gpu/pylib)
    mkdir -p "$out"
    if [ -d .gpu/extra/onnxruntime ]; then cp -r .gpu/extra/onnxruntime/. /tmp/site/onnxruntime/; fi
    export PYTHONPATH="$PWD/.gpu/pylib:$PYTHONPATH"
    timeout "${BENCH_GPU_TESTS_SECONDS:-480}" python3 -m pytest -q -m gpu -p no:cacheprovider \
      tests/runtime/test_controls.py tests/runtime/test_static_batch.py tests/runtime/test_static_step.py tests/bench/test_gqa.py \
      tests/export/test_translator_parity.py \
      2>&1 | tee "$out/gpu-tests.log" | tail -60 || true ;;
  controls-cost)  # what rows with decoding controls cost the greedy rows beside them
    mkdir -p "$out"
    export PYTHONPATH="$PWD/.gpu/pylib:$PYTHONPATH"
    if [ -d .gpu/extra/onnxruntime ]; then cp -r .gpu/extra/onnxruntime/. /tmp/site/onnxruntime/; fi
    run --quick --no-engine --no-load
    python3 -m bench.controls --repository "$work/repository/translator/1" --device cuda \
      --variant fp16 --rows 256 --jobs 2048 --every 16 --rounds 2 --json \
      | tee "$out/benchmarks-controls-cuda.json" ;;
  export) run --no-engine --no-load ;;
  engine) run --engine --no-load ;;
  load) run --no-engine --load ;;
  fronts)  # the service level again with 4 front processes, beside the load phase's one
    OUT_FRONTS="$out/fronts"; mkdir -p "$OUT_FRONTS"
    python3 -m bench.gpu --device cuda --workdir "$work" --out "$OUT_FRONTS" --graphs "$graphs" \
      --no-engine --load --server-fronts 4 ;;
  all) run --engine --load ;;
  static)  # gpu-marked tests of the static step and the fp16 graphs, then bench.static_step
    mkdir -p "$out"
    python3 -m pytest -q -m gpu tests/runtime/test_static_step.py tests/export/test_translator_parity.py \
      2>&1 | tee "$out/gpu-tests.log" || true
    python3 -m bench.static_step --device cuda --traced --out "$out" ;;
  inplace)  # the continuous batch on CUDA with its cache written in place (GQA, fp16 only),
    # growing, and the static step (its buckets replayed as CUDA graphs)
    mkdir -p "$out"
    python3 -m pytest -q -m gpu tests/export/test_translator_parity.py tests/runtime/test_static_batch.py \
      2>&1 | tee "$out/gpu-tests-in-place.log" || true
    for rows in 1 16 64; do
      python3 -m bench.continuous --device cuda --variants fp16 --static --rows "$rows" --requests 192 \
        --repository "$work/repository/translator/1" --json --markdown "$out/continuous-cuda-$rows.md" \
        > "$out/continuous-cuda-$rows.json"
    done ;;
  scaling)  # the server on the machine's CPU cores: 16 workers against one, 4 fronts against one
    mkdir -p "$out"
    python3 -m bench.scaling --device cpu --workers 1,16 --fronts 1,4 --clients 64,256 \
      --channels 32 --seconds 15 --rounds 1 --repository "$work/repository" \
      --json "$out/benchmarks-scaling.json" ;;
  pending)  # Sized for a lent machine's 15 minutes, its start and the parts included: every
    # step time-boxed (598 s in all, the most wanted first; the whole ran 225 s last time),
    # each one's results under $out as it ends. GroupQueryAttention alone against numpy
    # (bench.gqa_check under onnxruntime's kernels one by one, a table each on stdout), a
    # quick export (parity over 8 sentences a part), the gpu tests (GQA, the static batch,
    # the fp16 graphs in place), the served batch fp16 greedy at 1, 16 and 256 rows (in
    # place, growing and static captured, each one's tokens against in place), the service
    # level with the cache the server chooses by default (auto: static once checked on the
    # GPU, the choice printed) at 1 and 256 clients (the 30-token sentence with it), the
    # scheduler's host work a step (greedy jobs, beam 4 jobs, and both), the Memcpy
    # nodes of every graph, and one worker kept full at 256 rows in process (fp16, static and
    # growing: jobs/s, and onnxruntime runs and their time a step by graph).
    mkdir -p "$out"
    # GQA alone against numpy: onnxruntime's default kernels, then without flash attention's
    # decoding path (the one a shared buffer and one new token take), then without flash
    for setting in DEFAULT=1 ORT_DISABLE_FLASH_DECODE=1 ORT_DISABLE_FLASH_ATTENTION=1; do
      echo "GroupQueryAttention with $setting"
      env "$setting" timeout 14 python3 -m bench.gqa_check --device cuda || true
    done
    timeout 125 python3 -m bench.gpu --device cuda --workdir "$work" --out "$out" --graphs "$graphs" \
      --quick --no-engine --no-load || true
    version="$work/repository/translator/1"
    timeout 125 python3 -m pytest -q -m gpu tests/bench/test_gqa.py tests/runtime/test_static_batch.py \
      tests/export/test_translator_parity.py 2>&1 | tee "$out/gpu-tests-pending.log" || true
    for rows in 1 16 256; do
      timeout $((rows == 256 ? 50 : 40)) python3 -m bench.continuous --device cuda --variants fp16 \
        --beams 1 --static --rows "$rows" --requests $((rows == 256 ? 512 : 48)) --rounds 2 \
        --repository "$version" --json --markdown "$out/continuous-cuda-$rows.md" \
        > "$out/continuous-cuda-$rows.json" || true
    done
    OUT_STATIC="$out/static"; mkdir -p "$OUT_STATIC"
    timeout 90 python3 -m bench.gpu --device cuda --workdir "$work" --out "$OUT_STATIC" \
      --graphs "$graphs" --quick --no-engine --load --server-variant fp16 \
      --clients 1,256 --level-seconds 8 || true
    grep -h "steps with cache\|fronts" "$work/server/server.log" || true  # the cache and fronts chosen, and why
    for jobs in 256 1024; do  # the scheduler's own host work a step, on this machine's CPU
      timeout 5 python3 -m bench.scheduler_step --jobs "$jobs" --rounds 5 || true
    done
    timeout 3 python3 -m bench.scheduler_step --jobs 64 --beam 4 --rounds 3 || true
    timeout 3 python3 -m bench.scheduler_step --jobs 1024 --beam-jobs 1 --rounds 3 || true
    timeout 30 python3 -m bench.static_step --device cuda --out "$out" --memcpy-of "$version" \
      || true
    for cache in static growing; do  # one worker's scheduler kept full, no gRPC
      timeout 20 python3 -m bench.profile_scheduler --device cuda --repository "$version" \
        --variant fp16 --cache "$cache" --seconds 5 --top 12 || true
    done ;;
  goals-engine)  # Every goal of the issue on one machine, in two commands sized for a lent
    # machine's 15 minutes: first the machine, a quick export (parity over 8 sentences a part:
    # the export's own certificate is `bash bench/gpu.sh export`) and the engine level at
    # batches 1 to 1,024 (fp32, fp16, fp16 in place, fp16 static step replayed as CUDA graphs
    # one step at a time and 8 back to back, PyTorch eager; greedy, then beam 4 as the time
    # box allows)
    mkdir -p "$out"
    timeout 420 python3 -m bench.gpu --device cuda --workdir "$work" --out "$out" \
      --graphs "$graphs" --export-sentences 8 --engine --no-load --engine-seconds 180 || true ;;
  goals-serve)  # then, on the same warm machine: the CUDA server as set up by default (its
    # device check, cache and fronts printed) at 1 to 1,024 clients and the 30-token sentence;
    # the CPU server (16 workers, the default fronts) at 256 clients; one CPU worker's
    # in-process rate (fp32, 64 rows, one thread: the CPU scaling goal's "one worker"); one
    # CUDA worker's in-process rate (fp16, the static step, 256 rows): the encoder and the
    # step on their own threads, the encoder alone on its thread, inline, and inline without
    # the place op
    mkdir -p "$out"
    timeout 200 python3 -m bench.gpu --device cuda --workdir "$work" --out "$out" \
      --graphs "$graphs" --no-engine --load --clients 1,16,64,256,1024 --level-seconds 8 || true
    grep -h "steps with cache\|fronts\|variant" "$work/server/server.log" | head -20 || true
    OUT_CPU="$out/cpu-server"; mkdir -p "$OUT_CPU"
    timeout 150 python3 -m bench.gpu --device cpu --workdir "$work" --out "$OUT_CPU" \
      --graphs "$graphs" --quick --no-engine --load --clients 64,256 --level-seconds 10 || true
    timeout 30 python3 -m bench.profile_scheduler --device cpu --repository "$work/repository/translator/1" \
      --variant fp32 --rows 64 --seconds 10 2>&1 | tee "$out/cpu-worker.log" || true
    for way in "--encoder-thread --step-thread" --encoder-thread "" --no-scatter --no-place; do
      timeout 30 python3 -m bench.profile_scheduler --device cuda $way \
        --repository "$work/repository/translator/1" --variant fp16 --cache static --seconds 8 \
        2>&1 | tee -a "$out/cuda-worker.log" || true
    done ;;
  goals)  # goals-engine and goals-serve cut to fit one command: a quick export, the engine
    # level greedy up to its time box, the CUDA server at 1, 256 and 1,024 clients with the
    # 30-token sentence, one CUDA worker in process with the step on its thread and inline,
    # then the CPU server at 256 clients; each step time-boxed, its results under $out as it ends
    mkdir -p "$out"
    timeout 250 python3 -m bench.gpu --device cuda --workdir "$work" --out "$out" \
      --graphs "$graphs" --export-sentences 8 --engine --no-load --engine-seconds 120 \
      --beam-max-batch 16 > "$out/engine.log" 2>&1 || true
    timeout 120 python3 -m bench.gpu --device cuda --workdir "$work" --out "$out" \
      --graphs "$graphs" --no-engine --load --clients 1,256,1024 --level-seconds 6 || true
    grep -h "steps with cache\|fronts\|variant" "$work/server/server.log" | head -20 || true
    for way in "--encoder-thread --step-thread" --encoder-thread ""; do  # side by side
      timeout 25 python3 -m bench.profile_scheduler --device cuda $way \
        --repository "$work/repository/translator/1" --variant fp16 --cache static --seconds 6 \
        2>&1 | tee -a "$out/cuda-worker.log" || true
    done
    OUT_CPU="$out/cpu-server"; mkdir -p "$OUT_CPU"
    timeout 100 python3 -m bench.gpu --device cpu --workdir "$work" --out "$OUT_CPU" \
      --graphs "$graphs" --quick --no-engine --load --clients 256 --level-seconds 8 || true ;;
  step)  # the CUDA server with its steps inline, then on their own thread, twice each, at
    # 256 and 1,024 clients (one results folder each), each level's worker loop by phase
    # printed; a quick export first where none is
    timeout 150 python3 -m bench.gpu --device cuda --workdir "$work" --out "$out" \
      --graphs "$graphs" --export-sentences 8 --no-engine --no-load > /dev/null || true
    for step in inline thread inline thread; do
      OUT_S="$out/step-$step"; mkdir -p "$OUT_S"
      timeout 60 python3 -m bench.gpu --device cuda --workdir "$work" --out "$OUT_S" \
        --graphs "$graphs" --no-engine --load --server-step "$step" --clients 256,1024 \
        --level-seconds 6 | sed -n '/^| clients/,/^## Goals/p' || true
      grep -ih "died\|restart\|traceback\|error" "$work/server/server.log" | head -20 || true
    done ;;
  steady)  # three CUDA servers in a row with the step on its thread, then one inline, each
    # at 1, 256 and 1,024 clients (the 30-token sentence with them), every server's whole log
    # kept beside its results, Python's fault handler on in the workers (a crash's stack in
    # the log), each level's worker loop by phase printed (ms a step: messages, admission,
    # a step's prepare, run and outputs, reports, the outbox beside); then one worker kept
    # full in process at 256 rows, each way, side by side (the same phases)
    export PYTHONFAULTHANDLER=1 PYTHONPATH="$PWD/.gpu/pylib:$PYTHONPATH"
    mkdir -p "$out"
    timeout 150 python3 -m bench.gpu --device cuda --workdir "$work" --out "$out" \
      --graphs "$graphs" --export-sentences 8 --no-engine --no-load > "$out/export.log" 2>&1 || true
    for run in thread-1 thread-2 thread-3 inline-1; do
      OUT_S="$out/steady-$run"; mkdir -p "$OUT_S"
      timeout 75 python3 -m bench.gpu --device cuda --workdir "$work" --out "$OUT_S" \
        --graphs "$graphs" --no-engine --load --server-step "${run%-*}" --clients 1,256,1024 \
        --level-seconds 6 | sed -n '/^| clients/,/^## Goals/p' || true
      cp "$work/server/server.log" "$OUT_S/server.log" 2>/dev/null || true
      grep -ih "died\|restart\|traceback\|error\|fault\|signal" "$OUT_S/server.log" | head -20 || true
    done
    for way in "--encoder-thread --step-thread" --encoder-thread; do
      timeout 25 python3 -m bench.profile_scheduler --device cuda $way \
        --repository "$work/repository/translator/1" --variant fp16 --cache static --seconds 6 \
        2>&1 | tee -a "$out/cuda-worker.log" || true
    done ;;
  admission)  # where a job waits before its rows join: the inline server (static step)
    # with the encoder on its thread (the default), inline, and with 8 fronts, each at 1, 256
    # and 1,024 clients; each level's queue wait, encoder runs and their time, first token
    mkdir -p "$out"
    timeout 150 python3 -m bench.gpu --device cuda --workdir "$work" --out "$out" \
      --graphs "$graphs" --export-sentences 8 --no-engine --no-load > "$out/export.log" 2>&1 || true
    for run in "thread 0" "inline 0" "thread 8"; do
      set -- $run
      OUT_A="$out/admission-encoder-$1-fronts-$2"; mkdir -p "$OUT_A"
      fronts=(); [ "$2" != 0 ] && fronts=(--server-fronts "$2")
      timeout 90 python3 -m bench.gpu --device cuda --workdir "$work" --out "$OUT_A" \
        --graphs "$graphs" --no-engine --load --server-step inline --server-encoder "$1" \
        "${fronts[@]}" --clients 1,256,1024 --level-seconds 6 > /dev/null 2>&1 || true
      cp "$work/server/server.log" "$OUT_A/server.log" 2>/dev/null || true
      python3 -m bench.gpu_levels "$OUT_A/benchmarks-gpu.json" "$run" || true
    done ;;
  next)  # the open questions in one command sized for a lent machine (~8.5 min at most):
    # a quick export, then six CUDA servers in a row, each at 1 and 256 clients with the
    # 30-token sentence: the default three times (the goal's three in a row), the step on
    # its thread (its static step kept since the recording fix), 8 steps ahead in runs of
    # 2 ms, and 8 fronts (4 fronts were at 3.5 of 4 cores at 256 clients); a line a level
    # (bench.gpu_levels: tokens/s, queue wait, encoder runs, the fronts' CPU a call) and
    # every server's log kept, its cache, fronts and any restart printed
    export PYTHONFAULTHANDLER=1
    mkdir -p "$out"
    timeout 150 python3 -m bench.gpu --device cuda --workdir "$work" --out "$out" \
      --graphs "$graphs" --export-sentences 8 --no-engine --no-load > "$out/export.log" 2>&1 || true
    for run in default-1 default-2 default-3 thread ahead-8 fronts-8; do
      OUT_N="$out/next-$run"; mkdir -p "$OUT_N"
      case "$run" in
        thread) way=(--server-step thread) ;;
        ahead-8) way=(--server-steps-ahead 8) ;;
        fronts-8) way=(--server-fronts 8) ;;
        *) way=() ;;
      esac
      timeout 60 python3 -m bench.gpu --device cuda --workdir "$work" --out "$OUT_N" \
        --graphs "$graphs" --no-engine --load "${way[@]}" --clients 1,256 --level-seconds 6 \
        > "$OUT_N/bench.log" 2>&1 || true
      cp "$work/server/server.log" "$OUT_N/server.log" 2>/dev/null || true
      python3 -m bench.gpu_levels "$OUT_N/benchmarks-gpu.json" "$run" || true
      grep -ih "steps with cache\|steps ahead\|fronts\|died\|restart\|traceback\|fault" \
        "$OUT_N/server.log" | head -6 || true
    done ;;
  ahead)  # greedy steps run back to back on the device (--steps-ahead): the server's
    # device check of the static step with them first (the log says whether it kept the
    # static step), then one CUDA worker kept full in process at 1 and 256 rows, then the
    # default server at 1, 256 and 1,024 clients (the 30-token sentence with it): one step at
    # a time, 8 ahead in runs of at most 2 ms (the default --ahead-wait-ms), and 8 ahead with
    # no bound on a run's time, side by side
    mkdir -p "$out"
    timeout 150 python3 -m bench.gpu --device cuda --workdir "$work" --out "$out" \
      --graphs "$graphs" --export-sentences 8 --no-engine --no-load > "$out/export.log" 2>&1 || true
    for rows in 1 256; do
      for run in "1 2" "8 2" "8 1000"; do
        set -- $run
        timeout 20 python3 -m bench.profile_scheduler --device cuda --repository \
          "$work/repository/translator/1" --variant fp16 --cache static --rows "$rows" \
          --seconds 5 --steps-ahead "$1" --ahead-wait-ms "$2" 2>&1 | tee -a "$out/cuda-worker-ahead.log" || true
      done
    done
    for run in "1 2" "8 2" "8 1000"; do
      set -- $run
      OUT_H="$out/ahead-$1-wait-$2"; mkdir -p "$OUT_H"
      timeout 60 python3 -m bench.gpu --device cuda --workdir "$work" --out "$OUT_H" \
        --graphs "$graphs" --no-engine --load --server-steps-ahead "$1" --server-ahead-wait-ms "$2" \
        --clients 1,256,1024 --level-seconds 5 | sed -n '/^| clients/,/^## Goals/p' || true
      cp "$work/server/server.log" "$OUT_H/server.log" 2>/dev/null || true
      grep -h "steps with cache\|steps ahead" "$OUT_H/server.log" | head -4 || true
    done ;;
  families)  # the Hugging Face families served on CUDA: each in fp16 by default (its claim
    # held), the static step replayed as CUDA graphs, answering as the CPU's fp32 server
    # over gRPC and HTTP (tests/server/test_hf_fp16.py). The GPU machine has no
    # `transformers`, nor the HTTP edge's packages: first, on another machine, the versions
    # made and certified into .gpu/made (ATTNSERVE_TEST_MADE=.gpu/made python -m pytest -q
    # -p no:xdist tests/server/test_hf_fp16.py: its CPU case checks them there) and
    # `bash bench/gpu_pylib.sh`; then, carrying .gpu/tools, .gpu/pylib (8 MB),
    # .gpu/made/hf.made, .gpu/made/hf/repository (7 MB), service/wire and
    # data/translator/test.es, ~3 min
    mkdir -p "$out"
    for needed in .gpu/made/hf.made .gpu/pylib; do
      [ -e "$needed" ] || { echo "gpu.sh families: $needed not carried" >&2; exit 2; }
    done
    PYTHONPATH="$PWD/.gpu/pylib:$PYTHONPATH" ATTNSERVE_TEST_MADE="$PWD/.gpu/made" \
      timeout "${BENCH_GPU_TESTS_SECONDS:-300}" python3 -m pytest -q -m gpu -p no:cacheprovider \
      -p no:xdist tests/server/test_hf_fp16.py 2>&1 | tee "$out/gpu-tests-families.log" | tail -40 || true ;;
  workers)  # the CUDA server with 1 and 2 workers sharing the GPU at 256 and 1,024 clients,
    # then with its default (printed with why) at 1 to 1,024 clients and the 30-token
    # sentence; a quick export first where the workdir has none
    mkdir -p "$out"
    timeout 150 python3 -m bench.gpu --device cuda --workdir "$work" --out "$out" \
      --graphs "$graphs" --export-sentences 8 --no-engine --no-load > /dev/null || true
    for workers in 1 2; do
      OUT_W="$out/workers-$workers"; mkdir -p "$OUT_W"
      timeout 100 python3 -m bench.gpu --device cuda --workdir "$work" --out "$OUT_W" \
        --graphs "$graphs" --no-engine --load --server-workers "$workers" --clients 256,1024 \
        --level-seconds 10 | sed -n '/^## Service level/,/^## Goals/p' || true
    done
    timeout 150 python3 -m bench.gpu --device cuda --workdir "$work" --out "$out" \
      --graphs "$graphs" --no-engine --load --clients 1,16,64,256,1024 --level-seconds 8 \
      | sed -n '/^## Service level/,$p' || true
    grep -h "workers\|fronts\|steps with cache" "$work/server/server.log" | head -20 || true ;;
  *) echo "usage: bench/gpu.sh export|engine|load|fronts|all|static|inplace|scaling|pending|goals-engine|goals-serve|goals|step|steady|admission|next|ahead|families|workers|controls|controls-cost" >&2
    exit 2 ;;
esac
