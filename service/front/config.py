"""Server configuration: embedded defaults, then a TOML file, then environment, then flags.

Every setting has one name: `max_batch_rows` in the file, `ATTNSERVE_MAX_BATCH_ROWS` in the
environment, `--max-batch-rows` on the command line.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import ipaddress
import math
import os
import re
import subprocess
import tomllib
from dataclasses import dataclass, fields
from pathlib import Path

from service.runtime.cache_choice import choose_cache
from service.runtime.choices import (
    AUTO,
    BATCHING,
    CACHES,
    DEVICES,
    THREADING,
    VARIANTS,
    Auto,
    Batching,
    Cache,
    Device,
    Threading,
    Variant,
    one_of,
)
from service.runtime.errors import InvalidArgument, Unavailable
from service.runtime.requests import MAX_TEXT_CHARS
from service.runtime.rows.buckets import MAX_AHEAD
from service.worker.scheduler import AHEAD_WAIT, MAX_ROWS, WINDOW_SECONDS
from service.worker.settings import encoder_choice, step_choice, steps_ahead_choice

DEFAULT_REPOSITORY = Path(__file__).resolve().parents[2] / "data" / "repository"
ENV_PREFIX = "ATTNSERVE_"
# Caption requests carry encoded images (8 MB each by default), so a request may reach 32 MB;
# a translation's texts (up to 1,000 of max_text_chars each) are held to the same bound.
# Responses with alignments or attention maps can pass gRPC's default 4 MB, so they may reach
# 64 MB.
MAX_RECEIVE_BYTES, MAX_SEND_BYTES = 32 * 1024 * 1024, 64 * 1024 * 1024
# `fronts = 0`: a front per this many cores, at most this many fronts (the most measured)
CORES_PER_FRONT, MAX_AUTO_FRONTS = 4, 4
# The variant auto serves on cuda when the version has it certified, and how its graphs must
# have been made: fp16 graphs built op by op are the fastest there (docs/benchmarks-gpu.md).
GPU_PREFERENCE: tuple[tuple[str, str], ...] = (("fp16", "built"),)


# a path's segments as a URL may hold them unescaped, each after a /
ROOT_PATH = re.compile(r"(/[A-Za-z0-9._~!$&'()*+,;=:@-]+)+")


def trusted_networks(trusted: str) -> str | list:
    """`http_trusted_proxies` read: "*", or its networks (an address is one, its host bits
    cleared: 10.0.0.1/8 is 10.0.0.0/8); ValueError naming an entry that is neither."""
    trusted = trusted.strip()
    if trusted == "*":
        return trusted
    networks = []
    for entry in (entry.strip() for entry in trusted.split(",")) if trusted else ():
        try:
            networks.append(ipaddress.ip_network(entry, strict=False))
        except ValueError:
            raise ValueError(
                "http_trusted_proxies must be '*', '' or addresses and networks separated "
                f"by commas, got {entry!r}"
            ) from None
    return networks


def forwarded_allow_ips(trusted: str) -> str | list[str]:
    """`http_trusted_proxies` as uvicorn reads it (trusted_networks): "*", or each network
    written out, an IPv4 one also as an IPv6 socket ([::]) sees its clients
    (::ffff:127.0.0.1). uvicorn takes neither white space around "*" nor a network with
    host bits (10.0.0.1/8): it would trust no one."""
    networks = trusted_networks(trusted)
    if networks == "*":
        return networks
    mapped = [
        ipaddress.ip_network(f"::ffff:{net.network_address}/{96 + net.prefixlen}")
        for net in networks
        if net.version == 4
    ]
    return [str(net) for net in networks + mapped]


# the settings that take one of a list of choices, and their lists
CHOICES: dict[str, tuple[str, ...]] = {
    "device": (AUTO, *DEVICES),
    "variant": (AUTO, *VARIANTS),
    "cache": (AUTO, *CACHES),
    "batching": BATCHING,
    "encoder": (AUTO, *THREADING),
    "step": THREADING,
}


@dataclass(frozen=True)
class ServerConfig:
    listen: str = "0.0.0.0:50051"  # gRPC; port 0 lets the OS choose
    metrics_listen: str = "0.0.0.0:9400"  # Prometheus /metrics; port 0 lets the OS choose
    # The HTTP/JSON API, LibreTranslate's API and the page (service.front.http): HOST:PORT,
    # port 0 lets the OS choose; "" (the default): off
    http_listen: str = ""
    # where files translated over LibreTranslate's API wait for their download, shared by
    # the fronts; None: a temporary folder of the server's
    http_files: Path | None = None
    # the path a reverse proxy serves the HTTP API at ("/attnserve"), stripped by the proxy
    # before it passes a request on (a path that still carries it is served too):
    # redirects, the page's calls, /docs and the links the server writes carry it; ""
    # (the default): served at the root
    http_root_path: str = ""
    # the addresses and networks, comma-separated ("*": any, "": none), whose
    # X-Forwarded-Proto the HTTP API believes: a proxy there that ends TLS gets https links
    # (translatedFileUrl); by default the machine's own, over either loopback
    http_trusted_proxies: str = "127.0.0.1,::1"
    repository: Path = DEFAULT_REPOSITORY  # <model>/<version>/manifest.json ...
    device: Device | Auto = AUTO  # cuda when onnxruntime has CUDA, else cpu; or cpu, cuda
    workers: int = 0  # 0: one per usable CPU core (usable_cores), or one per GPU on cuda
    # gRPC front processes on one port (SO_REUSEPORT), every one reaching every worker
    # (service.front.fronts): one front answers about a thousand calls a second at most.
    # 0: one per CORES_PER_FRONT CPU cores, at most MAX_AUTO_FRONTS (front_choice)
    fronts: int = 0
    variant: Variant | Auto = AUTO  # per model version (auto_variant); or fp32, int8, fp16
    io_binding: bool | None = None  # None: on for cuda, off for cpu
    # how a step carries the key/value cache: "auto" writes it in place on the CPU where the
    # version ships that step, else it grows; on CUDA "auto" serves the static step where the
    # version ships it and it decodes as the growing one on the GPU at start-up
    # (service.runtime.cache_choice), else growing. Or "in_place" (on CUDA: fp16),
    # "growing", or "static" (in place at a fixed capacity over buffers per bucket of rows,
    # each bucket's step a CUDA graph on cuda); a version without that step keeps its default
    cache: Cache | Auto = AUTO
    batching: Batching = "continuous"  # or "request" (collect, then decode to the end)
    # where admissions' encoder runs: "thread" beside the steps (their rows join once it has
    # run), "inline" before the step; "auto": a thread on cuda, where the worker's loop
    # would otherwise leave the GPU idle, inline on the CPU, where each worker has a core
    encoder: Threading | Auto = AUTO
    # where a step of greedy rows runs: "inline", or "thread": beside the scheduler's own
    # work (the jobs the step before ended finished, partials, messages), at the cost of two
    # thread handoffs a step (docs/benchmarks.md, "The worker's loop")
    step: Threading = "inline"
    # greedy steps run back to back on the device between two looks of the host at the rows,
    # each fed the ids the one before chose (the static step; a batch with a beam, a sample or
    # an alignment steps one at a time; a stream gets a run's tokens in one partial); 1: every
    # step's ids go through the host (steps_ahead_choice)
    steps_ahead: int = 1
    # ... and a run of them lasts at most this long at the last run's pace (its host time
    # once, its device time a step; one step where even one takes longer): what waits for
    # the host to look (a job to join, a first token, a result) waits at most about this
    ahead_wait_ms: float = AHEAD_WAIT * 1000
    batch_window_ms: float = WINDOW_SECONDS * 1000  # how long request-level batching collects
    max_batch_rows: int = MAX_ROWS  # hypotheses decoded together by one worker
    max_queued_requests: int = 256  # beyond: RESOURCE_EXHAUSTED
    # ... and RESOURCE_EXHAUSTED at once for a call that would pass the limit on batch rows in
    # flight that keeps the calls' p99 latency within this budget (service.front.admission; 0: no
    # such limit): under overload the calls that fit keep their latency. Set it above the
    # latency of the longest calls of normal traffic, e.g. their p99 at capacity.
    latency_budget_seconds: float = 0.0
    max_text_chars: int = MAX_TEXT_CHARS  # one text of a translation, split into sentences
    # The response cache (service.front.cache), per front: inputs and estimated bytes held at
    # most; 0 for either turns it off.
    response_cache_entries: int = 10_000
    response_cache_bytes: int = 64 * 1024 * 1024
    max_input_tokens: int = 0  # per sentence; 0: the model's own limit
    max_output_length: int = 0  # decoding steps; 0: the model's own limit
    default_max_length: int = 256  # when a request leaves max_length unset (at most the model's)
    default_translator: str = ""  # TranslationService's model when a request names none
    default_captioner: str = ""  # CaptionService's; "": the only model of that service
    max_image_bytes: int = 8 * 1024 * 1024  # one encoded image in a caption request
    max_image_pixels: int = 4096 * 4096  # width x height, refused before decoding
    drain_seconds: float = 20.0  # SIGTERM: how long in-flight calls may finish
    ready_file: Path | None = None  # written (JSON: ports, workers) once serving
    # Model versions while serving (service.front.versions): how often the repository is looked
    # at (0: never, what is there at start-up is served) and how many versions of a model are
    # served, the newest (0: all).
    watch_seconds: float = 5.0
    max_versions: int = 0
    # Security (service.front.security): TLS when both are set; mutual TLS with a client CA.
    tls_cert: Path | None = None  # PEM certificate chain of the server
    tls_key: Path | None = None  # PEM private key of the server
    tls_client_ca: Path | None = None  # PEM CA bundle: clients must show a certificate it signed
    auth_tokens: str = ""  # bearer tokens "TOKEN [SERVICE,...]" separated by ";" (secret)
    auth_tokens_file: Path | None = None  # one "TOKEN [SERVICE,...]" a line
    # The metrics endpoint: HTTPS with both; basic authentication with "user:password" lines.
    metrics_tls_cert: Path | None = None
    metrics_tls_key: Path | None = None
    metrics_basic_auth_file: Path | None = None
    # Connections: streams at once per connection; keepalive pings a client may send (one per
    # this many seconds at most, else the connection is closed); a connection's age after
    # which the server asks the client to reconnect (so clients behind a load balancer
    # spread over new replicas), with a grace for its calls to finish; 0: no limit.
    max_concurrent_streams: int = 1000
    # Workers on a Ray cluster (service.front.cluster; the ray extra): Ray's address ("auto",
    # the head's HOST:PORT, or ray://HOST:PORT); "" (the default): worker processes of this
    # machine. Ray Serve replicas of replica_cpus CPUs and replica_gpus GPUs each, between
    # min_replicas and max_replicas (0: min_replicas), as many as keep each one's batch rows
    # in use and waiting at replica_target_rows, scaled up after the load stays above it for
    # replica_upscale_seconds and down after replica_downscale_seconds below. `workers` and
    # `fronts` are this machine's: with ray, workers stays 0 and fronts 0 or 1 (one front,
    # the replicas' workers).
    ray: str = ""
    min_replicas: int = 1
    max_replicas: int = 0
    replica_cpus: float = 1.0
    replica_gpus: float = 0.0
    replica_target_rows: int = 16
    replica_upscale_seconds: float = 10.0
    replica_downscale_seconds: float = 120.0
    min_ping_interval_seconds: float = 10.0
    max_connection_age_seconds: float = 600.0
    max_connection_age_grace_seconds: float = 60.0

    def validate(self) -> ServerConfig:
        if problems := self.problems():
            raise InvalidArgument("configuration: " + "; ".join(problems))
        return self

    def problems(self) -> list[str]:
        """Every setting out of its range or list of choices, and every security setting the
        server would refuse (a TLS file without its pair, a token too short), each named."""
        from service.front.security import security_problems  # grpc: not for the parser

        problems = []
        for name, choices in CHOICES.items():
            if getattr(self, name) not in choices:
                value = getattr(self, name)
                problems.append(f"{name} must be {one_of(choices)}, got {value!r}")
        if self.cache == "static" and self.io_binding is False:
            problems.append("cache static runs over bound buffers: io_binding cannot be false")
        for name in (
            "workers",
            "max_input_tokens",
            "max_output_length",
            "max_versions",
            "response_cache_entries",
            "response_cache_bytes",
            "max_replicas",
        ):
            if getattr(self, name) < 0:
                problems.append(f"{name} must be 0 or more")
        for name in (
            "max_batch_rows",
            "max_queued_requests",
            "default_max_length",
            "max_text_chars",
            "max_image_bytes",
            "max_image_pixels",
            "min_replicas",
            "replica_target_rows",
        ):
            if getattr(self, name) < 1:
                problems.append(f"{name} must be 1 or more")
        for name in (
            "ahead_wait_ms",
            "drain_seconds",
            "watch_seconds",
            "latency_budget_seconds",
            "min_ping_interval_seconds",
            "max_connection_age_seconds",
            "max_connection_age_grace_seconds",
            "replica_cpus",
            "replica_gpus",
            "replica_upscale_seconds",
            "replica_downscale_seconds",
        ):
            if getattr(self, name) < 0:
                problems.append(f"{name} must be 0 or more")
        if not 1 <= self.steps_ahead <= MAX_AHEAD:
            problems.append(f"steps_ahead must be 1 to {MAX_AHEAD}")
        if self.fronts < 0:
            problems.append("fronts must be 0 (one per 4 CPU cores) or more")
        if self.ray and importlib.util.find_spec("ray") is None:
            problems.append("ray needs the ray extra: pip install 'attnserve[serve,ray]'")
        if self.ray and self.fronts > 1:
            problems.append("fronts must be 0 or 1 with ray: one front reaches the replicas")
        if self.ray and self.workers:
            problems.append(
                "workers must be 0 with ray: min_replicas and max_replicas count the replicas"
            )
        if 0 < self.max_replicas < self.min_replicas:
            problems.append("max_replicas must be 0 (min_replicas) or min_replicas or more")
        if self.max_concurrent_streams < 1:
            problems.append("max_concurrent_streams must be 1 or more")
        if not self.batch_window_ms >= 0:
            problems.append("batch_window_ms must be 0 or more")
        for name in ("listen", "metrics_listen", "http_listen"):
            if name == "http_listen" and not self.http_listen:
                continue
            host, _, port = getattr(self, name).rpartition(":")
            if not host or not port.isdigit() or int(port) > 65535:
                problems.append(f"{name} must be HOST:PORT (0..65535), got {getattr(self, name)!r}")
        if self.http_root_path and not ROOT_PATH.fullmatch(self.http_root_path):
            problems.append(
                "http_root_path must be '' or a path such as /attnserve (no trailing /), "
                f"got {self.http_root_path!r}"
            )
        try:
            trusted_networks(self.http_trusted_proxies)
        except ValueError as bad:
            problems.append(str(bad))
        return problems + security_problems(self)

    def grpc_options(self) -> list[tuple[str, int]]:
        """The gRPC server's channel arguments: message sizes and the connection settings."""
        options = [
            ("grpc.max_receive_message_length", MAX_RECEIVE_BYTES),
            ("grpc.max_send_message_length", MAX_SEND_BYTES),
            ("grpc.max_concurrent_streams", self.max_concurrent_streams),
            (
                "grpc.http2.min_ping_interval_without_data_ms",
                int(self.min_ping_interval_seconds * 1000),
            ),
            ("grpc.http2.max_ping_strikes", 2),
            ("grpc.keepalive_permit_without_calls", 1),
            # several fronts bind one port; one front alone refuses a second server there
            ("grpc.so_reuseport", int(self.front_choice()[0] > 1)),
        ]
        if self.max_connection_age_seconds:
            options += [
                ("grpc.max_connection_age_ms", int(self.max_connection_age_seconds * 1000)),
                (
                    "grpc.max_connection_age_grace_ms",
                    int(self.max_connection_age_grace_seconds * 1000),
                ),
            ]
        return options

    def device_choice(self) -> tuple[str, str]:
        """(device, why): "auto" becomes cuda where onnxruntime offers CUDA and a GPU is
        visible, else cpu. An explicit cuda without CUDA in onnxruntime is an error. On a
        Ray cluster the replicas' device: cuda where each asks for a GPU."""
        import onnxruntime as ort

        if self.ray:
            if self.device != "auto":
                return self.device, "set by the configuration (the replicas')"
            if self.replica_gpus > 0:
                return "cuda", f"each replica asks for {self.replica_gpus:g} GPU"
            return "cpu", "the replicas ask for no GPU (replica_gpus 0)"

        providers = ort.get_available_providers()
        cuda = "CUDAExecutionProvider" in providers
        if self.device == "cuda" and not cuda:
            raise InvalidArgument(
                "configuration: device cuda, but this onnxruntime has no CUDA execution "
                f"provider ({providers}); install the gpu extra"
            )
        if self.device != "auto":
            return self.device, "set by the configuration"
        if not cuda:
            return "cpu", f"onnxruntime has no CUDAExecutionProvider ({', '.join(providers)})"
        gpus, lister = visible_gpus()
        if not gpus:
            return "cpu", f"onnxruntime has CUDAExecutionProvider, but {lister} lists no GPU"
        listed = f"{gpus} GPU" + ("s" if gpus > 1 else "")
        return "cuda", f"onnxruntime has CUDAExecutionProvider and {lister} lists {listed}"

    def variant_choice(self, device: str, manifest: dict) -> tuple[str, str]:
        """(variant, why) of one model version: the configured variant, or auto_variant."""
        if self.variant == "auto":
            return auto_variant(device, manifest)
        reason = "set by the configuration"
        if self.variant not in manifest.get("graphs", {}):
            reason += f", but this version has no {self.variant} graphs"
        elif self.variant not in certified_variants(manifest):
            reason += f", but its {self.variant} graphs have no passing parity certificate"
        return self.variant, reason

    def front_choice(self) -> tuple[int, str]:
        """(front processes, why): as configured, else one per CORES_PER_FRONT CPU cores this
        process may use, at least one and at most MAX_AUTO_FRONTS; one with ray."""
        if self.ray:
            return 1, "one front reaches the replicas of a Ray cluster"
        if self.fronts:
            return self.fronts, "set by the configuration"
        cores = usable_cores()
        count = min(MAX_AUTO_FRONTS, max(1, cores // CORES_PER_FRONT))
        return count, (
            f"one per {CORES_PER_FRONT} of the {cores} CPU cores, at most {MAX_AUTO_FRONTS}: "
            "a front answers a bounded number of calls a second, and more fronts than that "
            "take cores from the workers (docs/benchmarks.md)"
        )

    def worker_count(self, device: str) -> int:
        return self.worker_choice(device)[0]

    def worker_choice(self, device: str) -> tuple[int, str]:
        """(worker processes, why): as configured; else one per usable CPU core on cpu, one
        per GPU on cuda; on a Ray cluster, the replicas (min_replicas to start with)."""
        if self.ray:
            return self.min_replicas, "Ray Serve replicas, min_replicas to start with"
        if self.workers:
            return self.workers, "set by the configuration"
        if device != "cuda":
            cores = usable_cores()
            return cores, f"one per usable CPU core ({cores})"
        gpus = max(1, gpu_count())
        return gpus, (
            f"one per GPU ({gpus}): workers sharing a GPU serve fewer calls than one "
            "(docs/benchmarks-gpu.md)"
        )


def cannot_listen(setting: str, address: str, reason: str) -> Unavailable:
    """The refusal of an address the server cannot listen on (`setting` names it)."""
    return Unavailable(f"{setting} {address}: cannot listen there ({reason})")


def usable_cores() -> int:
    """The CPU cores this process may use: those it may run on (its affinity), fewer where its
    cgroup's CPU quota allows less (a container started with --cpus 2 on a 64-core host: 2)."""
    cores = len(os.sched_getaffinity(0))
    quota = cpu_quota()
    return max(1, min(cores, math.ceil(quota)) if quota is not None else cores)


def cpu_quota(
    root: Path = Path("/sys/fs/cgroup"), membership: Path = Path("/proc/self/cgroup")
) -> float | None:
    """Cores' worth of CPU time the cgroups of this process allow (quota over period, the
    smallest along its cgroup and the cgroups above it), or None where none sets a quota:
    cgroup v2's cpu.max, or v1's cpu.cfs_quota_us and cpu.cfs_period_us."""
    try:
        lines = membership.read_text().splitlines()
    except OSError:
        return None
    places = []  # (directory of this process's cgroup, how that hierarchy writes its quota)
    for line in lines:
        entry = line.split(":", 2)
        if len(entry) != 3:  # not "id:controllers:path"
            continue
        _, controllers, path = entry
        relative = path.strip("/")
        if controllers == "":  # v2: the unified hierarchy
            places.append((root / relative, root, "v2"))
        elif "cpu" in controllers.split(","):
            mount = root / controllers
            mount = mount if mount.is_dir() else root / "cpu"
            places.append((mount / relative, mount, "v1"))
    quotas = []
    for directory, top, version in places:
        while True:
            quotas.append(_quota(directory, version))
            if directory == top or top not in directory.parents:
                break
            directory = directory.parent
    found = [q for q in quotas if q is not None]
    return min(found) if found else None


def _quota(directory: Path, version: str) -> float | None:
    try:
        if version == "v2":
            quota, _, period = (directory / "cpu.max").read_text().strip().partition(" ")
        else:
            quota = (directory / "cpu.cfs_quota_us").read_text().strip()
            period = (directory / "cpu.cfs_period_us").read_text().strip()
        if quota in ("max", "-1") or float(period) <= 0:
            return None
        return float(quota) / float(period)
    except (OSError, ValueError):
        return None


def gpu_count() -> int:
    return visible_gpus()[0]


def visible_gpus() -> tuple[int, str]:
    """(GPUs this process may use, what listed them): CUDA_VISIBLE_DEVICES when set, else
    `nvidia-smi -L`, else /proc/driver/nvidia/gpus."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([d for d in visible.split(",") if d.strip()]), "CUDA_VISIBLE_DEVICES"
    try:
        listing = subprocess.run(
            ["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20, check=True
        ).stdout
        return sum(line.startswith("GPU ") for line in listing.splitlines()), "nvidia-smi"
    except (OSError, subprocess.SubprocessError):
        return len(list(Path("/proc/driver/nvidia/gpus").glob("*"))), "/proc/driver/nvidia"


def certified_variants(manifest: dict) -> list[str]:
    """The variants whose graphs the version holds and whose graph parity its certificate
    (export.certify, `parity` in the manifest) passed, in a certificate that passed."""
    parity = manifest.get("parity") or {}
    if parity.get("passed") is not True:
        return []
    passed = parity.get("graphs", {})
    return [v for v in manifest.get("graphs", {}) if passed.get(v, {}).get("passed") is True]


def auto_variant(device: str, manifest: dict) -> tuple[str, str]:
    """(variant, why) for `variant = "auto"`: on cuda the first GPU_PREFERENCE variant the
    version has certified graphs of, made the preferred way, else fp32; on cpu fp32 (int8
    only when asked)."""
    if device != "cuda":
        return "fp32", "the CPU default (int8 only when asked)"
    certified, made = certified_variants(manifest), manifest.get("graphs_made", {})
    for variant, method in GPU_PREFERENCE:
        if variant in certified and made.get(variant, "traced") == method:
            return variant, (
                f"certified {variant} graphs {method} op by op, the fastest on "
                "CUDA as measured (docs/benchmarks-gpu.md)"
            )
    if "fp16" not in manifest.get("graphs", {}):
        return "fp32", "no fp16 graphs in this version"
    if "fp16" not in certified:
        return "fp32", "its fp16 graphs have no passing parity certificate"
    return "fp32", "its fp16 graphs are traced, slower than fp32 on CUDA as measured"


def cache_line(cache: str, device: str) -> str:
    """How the workers will carry each step's key/value cache: the rule `choose_cache` states
    for every version (each worker applies it per model version at start-up, and logs what
    it chose and why)."""
    where = f" on {device}" if cache == AUTO else ""
    return f"cache {cache}{where}: {choose_cache(cache, device).reason}"


def choice_lines(
    device: str,
    device_reason: str,
    variants: dict[str, tuple[str, str]],
    config: ServerConfig,
    fronts: tuple[int, str] | None = None,
    workers: tuple[int, str] | None = None,
) -> list[str]:
    """What `serve --print-config` prints and the server logs: the device, the front and
    worker processes (as chosen, with why), how `config` has the cache carried, where the
    encoder and a step run and how many steps run ahead, and each model version's variant
    (keyed "name/version"), with why."""
    lines = [f"device {device}: {device_reason}"]
    if fronts is not None:
        lines.append(f"fronts {fronts[0]}: {fronts[1]}")
    if workers is not None:
        lines.append(f"workers {workers[0]}: {workers[1]}")
    lines.append(cache_line(config.cache, device))
    on_thread, why = encoder_choice(config.encoder, device)
    lines.append(f"encoder {'thread' if on_thread else 'inline'}: {why}")
    on_thread, why = step_choice(config.step)
    lines.append(f"step {'thread' if on_thread else 'inline'}: {why}")
    ahead = config.steps_ahead
    lines.append(f"steps ahead {ahead}: {steps_ahead_choice(ahead, config.ahead_wait_ms)}")
    return lines + [f"variant {v} for {key}: {why}" for key, (v, why) in variants.items()]


def _of_kind(kind: str, value) -> bool:
    """Whether a value not given as text (TOML's, a flag's) is of a field's type: a bool for
    a bool, an int (not a bool) for an int, a number for a float, a path for a path; any
    other field takes text only."""
    number = isinstance(value, int | float) and not isinstance(value, bool)
    for name, ok in (
        ("bool", isinstance(value, bool)),
        ("int", number and isinstance(value, int)),
        ("float", number),
        ("Path", isinstance(value, os.PathLike)),
    ):
        if name in kind:
            return ok
    return False


def _convert(name: str, kind, value):
    """A setting from text (environment, flags) or TOML to the field's type."""
    if value is None:
        return None
    text, kind = isinstance(value, str), str(kind)
    try:
        if not text and not _of_kind(kind, value):  # a TOML value: of the field's own type
            raise ValueError(f"a {kind.split(' ')[0]} is needed")
        if "Path" in kind:
            return Path(value)
        if "bool" in kind:
            if not text:
                return value
            lowered = value.strip().lower()
            if lowered in ("", "auto", "none"):
                return None
            if lowered not in ("1", "0", "true", "false", "yes", "no", "on", "off"):
                raise ValueError(value)
            return lowered in ("1", "true", "yes", "on")
        if "int" in kind:
            return int(value)
        if "float" in kind:
            number = float(value)
            if not math.isfinite(number):
                raise ValueError("not a finite number")
            return number
        return str(value)
    except ValueError as error:
        raise ValueError(f"{name}: cannot read {value!r}") from error


def load_config(
    file: Path | None = None, environ: dict | None = None, overrides: dict | None = None
) -> ServerConfig:
    """Defaults, updated by the TOML `file`, then ATTNSERVE_* variables, then `overrides`
    (flags; None values are ignored). Every problem of every layer is named in one error."""
    environ = os.environ if environ is None else environ
    kinds = {f.name: f.type for f in fields(ServerConfig)}
    given: list[tuple[str, object]] = []  # (setting, value) in the order the layers apply
    problems: list[str] = []
    if file is not None:
        try:
            table = tomllib.loads(Path(file).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as error:  # TOML is UTF-8
            raise InvalidArgument(f"configuration file {file}: {error}") from error
        if unknown := sorted(set(table) - set(kinds)):
            problems.append(f"file {file}: unknown settings {unknown}")
        given += [(k, v) for k, v in table.items() if k in kinds]
    for name in kinds:
        text = environ.get(ENV_PREFIX + name.upper(), "")
        if text.strip():  # set and not empty
            given.append((name, text))
    given += [(k, v) for k, v in (overrides or {}).items() if v is not None]
    values: dict = {}
    for name, value in given:
        try:
            values[name] = _convert(name, kinds[name], value)
        except ValueError as error:
            problems.append(str(error))
    problems += dataclasses.replace(ServerConfig(), **values).problems()
    if problems:
        raise InvalidArgument("configuration: " + "; ".join(problems))
    return dataclasses.replace(ServerConfig(), **values)
