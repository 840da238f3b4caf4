"""The benchmarks' shared library, one idea a module.

Shared by the server benchmarks (load, gpu, scaling, soak, overload):
- paths: where the project's data, checkpoints and model repository lie;
- arguments: the tail of a server bench's command line;
- reports: a report as JSON (stdout and a file), a Markdown table row;
- server: one `attnserve serve` process, started, waited for, measured and stopped;
- processes: CPU seconds, resident memory and open files, from /proc;
- metrics: the server's Prometheus histograms over a level, as means and quantiles;
- stream_loads: streaming (and unary) calls timed event by event, closed and open loops;
- sentence_loads: a few fixed sentences, closed loops of unary Translate calls over them;
- client_processes: closed loops of unary Translate calls spread over client processes;
- summaries: a level's latencies, throughput, goodput and correctness from its samples;
- repository: the model versions a bench runs (found in a repository, or exported).

The load benchmark's own parts:
- workload: its requests and images, and their in-process answers (the reference);
- scheduler_loop: the same requests through the worker's scheduler in process;
- traffic: a model's side of the run, a loop of a level, a started server;
- levels: the measurements of a run, level by level, against running servers;
- load_goals: its ratios and goals;
- load_report: its JSON report, assembled from a run;
- load_markdown: its report as Markdown.

The GPU benchmark's own parts:
- gpu_plan: what one run measures, and how long it may take;
- repository (above): the translator it runs, exported and certified, or given;
- devices: the device's limits (CUDA with torch, the CPU with bench.machine);
- engine_workers: one engine in a spawned process, decoding as the server does;
- engine_level: parity, batch-1 steps and the time-boxed cases, against the physical limit;
- service_level: `attnserve serve` on the device under closed loops of client processes
  (client_processes, above);
- gpu_goals: its goals table;
- gpu_markdown: its report as Markdown.
"""
