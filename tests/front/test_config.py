"""The device and the variant a server chooses, and `attnserve serve --print-config`, which
says what it chose and why (no GPU needed: onnxruntime's providers and the GPU listing are
replaced where a test needs CUDA)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import onnxruntime
import pytest

from attnserve.cli import main
from service.front import config as config_module
from service.front.config import (
    ServerConfig,
    auto_variant,
    cache_line,
    certified_variants,
    cpu_quota,
    load_config,
    usable_cores,
)
from service.runtime.errors import InvalidArgument
from service.worker.settings import step_choice, steps_ahead_choice

CUDA_PROVIDERS = ["CUDAExecutionProvider", "CPUExecutionProvider"]


def _manifest(*variants: str, certified=("fp32", "int8"), passed: bool = True) -> dict:
    """A manifest's graphs and parity certificate as export.certify writes them (the graph
    parity of the `certified` variants only)."""
    graphs = {v: {"encoder": f"{v}/encoder.onnx", "decoder": f"{v}/decoder.onnx"} for v in variants}
    checked = {v: {"variant": v, "passed": True} for v in certified if v in variants}
    return {
        "model": {"name": "translator", "version": "1", "kind": "translator"},
        "graphs": graphs,
        "parity": {"graphs": checked, "decodes": [], "passed": passed},
    }


def test_auto_takes_certified_built_fp16_on_cuda_and_fp32_otherwise():
    certified = _manifest("fp32", "int8", "fp16", certified=("fp32", "int8", "fp16"))
    built = {**certified, "graphs_made": dict.fromkeys(certified["graphs"], "built")}
    assert config_module.GPU_PREFERENCE == (("fp16", "built"),)
    assert certified_variants(built) == ["fp32", "int8", "fp16"]
    assert auto_variant("cuda", built) == (
        "fp16",
        "certified fp16 graphs built op by op, the fastest on CUDA as measured "
        "(docs/benchmarks-gpu.md)",
    )
    traced = {**certified, "graphs_made": dict.fromkeys(certified["graphs"], "traced")}
    for manifest in (traced, certified):  # no record of how: traced, as before the builder
        assert auto_variant("cuda", manifest) == (
            "fp32",
            "its fp16 graphs are traced, slower than fp32 on CUDA as measured",
        )

    without = _manifest("fp32", "int8")
    assert auto_variant("cuda", without) == ("fp32", "no fp16 graphs in this version")

    uncertified = _manifest("fp32", "int8", "fp16")  # exported, its parity never checked
    uncertified["graphs_made"] = built["graphs_made"]
    variant, reason = auto_variant("cuda", uncertified)
    assert (variant, reason) == ("fp32", "its fp16 graphs have no passing parity certificate")
    failed = _manifest("fp32", "fp16", certified=("fp32", "fp16"), passed=False)
    failed["graphs_made"] = built["graphs_made"]
    assert certified_variants(failed) == [] and auto_variant("cuda", failed)[0] == "fp32"
    no_certificate = {"graphs": certified["graphs"], "graphs_made": built["graphs_made"]}
    assert auto_variant("cuda", no_certificate)[0] == "fp32"

    for manifest in (built, certified, without, uncertified):  # int8 only when asked
        assert auto_variant("cpu", manifest) == ("fp32", "the CPU default (int8 only when asked)")


def test_an_explicit_variant_wins_and_is_validated_as_before():
    manifest = _manifest("fp32", "int8", "fp16", certified=("fp32", "int8", "fp16"))
    assert ServerConfig().variant == "auto"
    assert load_config(None, {"ATTNSERVE_VARIANT": "int8"}).variant_choice("cuda", manifest) == (
        "int8",
        "set by the configuration",
    )
    fp16 = load_config(None, {}, {"variant": "fp16"})
    assert fp16.variant_choice("cpu", _manifest("fp32")) == (
        "fp16",
        "set by the configuration, but this version has no fp16 graphs",
    )
    int8_failed = _manifest("fp32", "int8", certified=("fp32",))  # its int8 claim missed
    assert load_config(None, {"ATTNSERVE_VARIANT": "int8"}).variant_choice("cpu", int8_failed) == (
        "int8",
        "set by the configuration, but its int8 graphs have no passing parity certificate",
    )
    assert load_config(None, {}, {"variant": "auto"}).variant_choice("cpu", manifest)[0] == "fp32"
    with pytest.raises(InvalidArgument, match="variant must be auto, fp32, int8 or fp16"):
        load_config(None, {"ATTNSERVE_VARIANT": "bf16"})


def test_the_device_says_why(monkeypatch):
    monkeypatch.setattr(onnxruntime, "get_available_providers", lambda: CUDA_PROVIDERS)
    monkeypatch.setattr(config_module, "visible_gpus", lambda: (1, "nvidia-smi"))
    auto = ServerConfig()
    assert auto.device_choice() == (
        "cuda",
        "onnxruntime has CUDAExecutionProvider and nvidia-smi lists 1 GPU",
    )
    assert replace(auto, device="cpu").device_choice() == ("cpu", "set by the configuration")
    monkeypatch.setattr(config_module, "visible_gpus", lambda: (0, "nvidia-smi"))
    assert auto.device_choice() == (
        "cpu",
        "onnxruntime has CUDAExecutionProvider, but nvidia-smi lists no GPU",
    )
    monkeypatch.setattr(onnxruntime, "get_available_providers", lambda: ["CPUExecutionProvider"])
    assert auto.device_choice() == (
        "cpu",
        "onnxruntime has no CUDAExecutionProvider (CPUExecutionProvider)",
    )
    with pytest.raises(InvalidArgument, match="device cuda, but this onnxruntime has no CUDA"):
        replace(auto, device="cuda").device_choice()


def test_visible_gpus_counts_cuda_visible_devices_then_nvidia_smi(monkeypatch, tmp_path):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    assert config_module.visible_gpus() == (2, "CUDA_VISIBLE_DEVICES")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    fake = tmp_path / "nvidia-smi"
    fake.write_text(
        "#!/bin/sh\necho 'GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)'\n"
        "echo '  MIG 1g.10gb     Device  0: (UUID: MIG-2)'\n"
        "echo 'GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-3)'\n"
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert config_module.visible_gpus() == (2, "nvidia-smi")
    assert config_module.gpu_count() == 2


@pytest.mark.parametrize("gpus", [1, 2, 8])
def test_cuda_workers_one_per_gpu_by_default(monkeypatch, gpus):
    """Workers sharing a GPU serve fewer calls than one (docs/benchmarks-gpu.md): by default
    one per GPU, with that as the why; pool.py gives worker i GPU i."""
    monkeypatch.setattr(config_module, "cpu_quota", lambda: None)
    monkeypatch.setattr("os.sched_getaffinity", lambda _: set(range(16)))
    monkeypatch.setattr(config_module, "visible_gpus", lambda: (gpus, "nvidia-smi"))
    count, why = ServerConfig().worker_choice("cuda")
    assert count == gpus == ServerConfig().worker_count("cuda")
    assert why.startswith(f"one per GPU ({gpus}):") and "sharing a GPU" in why
    assert ServerConfig(workers=3).worker_choice("cuda") == (3, "set by the configuration")
    assert ServerConfig().worker_choice("cpu") == (16, "one per usable CPU core (16)")


def _repository(root, **versions: dict):
    for key, manifest in versions.items():
        name, version = key.split("_")
        directory = root / name / version
        directory.mkdir(parents=True)
        model = {**manifest["model"], "name": name, "version": version}
        (directory / "manifest.json").write_text(json.dumps({**manifest, "model": model}))
    return root


def _print_config(capsys, monkeypatch, *flags: str) -> tuple[int, list[str], list[str]]:
    for name in ("DEVICE", "VARIANT", "REPOSITORY"):
        monkeypatch.delenv(f"ATTNSERVE_{name}", raising=False)
    code = main(["serve", "--print-config", *flags])
    lines = capsys.readouterr().out.splitlines()
    return code, lines, [line for line in lines if line.startswith("# ")]


def test_print_config_names_the_device_and_each_variant_with_why(capsys, monkeypatch, tmp_path):
    translator = _manifest("fp32", "int8", "fp16", certified=("fp32", "int8", "fp16"))
    translator["graphs_made"] = dict.fromkeys(translator["graphs"], "built")
    root = _repository(
        tmp_path,
        translator_1=translator,
        captioner_1=_manifest("fp32", "int8"),
    )
    monkeypatch.setattr(onnxruntime, "get_available_providers", lambda: CUDA_PROVIDERS)
    monkeypatch.setattr(config_module, "visible_gpus", lambda: (1, "nvidia-smi"))
    monkeypatch.setattr("os.sched_getaffinity", lambda _: set(range(16)))
    monkeypatch.setattr(config_module, "cpu_quota", lambda: None)
    code, lines, chosen = _print_config(capsys, monkeypatch, "--repository", str(root))
    assert code == 0
    assert 'variant = "auto"' in lines and 'device = "auto"' in lines and "fronts = 0" in lines
    assert chosen == [
        "# device cuda: onnxruntime has CUDAExecutionProvider and nvidia-smi lists 1 GPU",
        "# fronts 4: " + ServerConfig().front_choice()[1],
        "# workers 1: " + ServerConfig().worker_choice("cuda")[1],
        "# " + cache_line("auto", "cuda"),
        "# encoder thread: auto on cuda: beside the steps, where an encoder inline would idle "
        "the GPU",
        "# step inline: " + step_choice("inline")[1],
        "# steps ahead 1: " + steps_ahead_choice(1),
        "# variant fp32 for captioner/1: no fp16 graphs in this version",
        "# variant fp16 for translator/1: certified fp16 graphs built op by op, the fastest on "
        "CUDA as measured (docs/benchmarks-gpu.md)",
    ]
    assert "static step replayed as CUDA graphs" in chosen[3] and "else growing" in chosen[3]

    code, lines, chosen = _print_config(
        capsys,
        monkeypatch,
        "--repository",
        str(root),
        "--device",
        "cpu",
        "--variant",
        "int8",
        "--fronts",
        "2",
        "--steps-ahead",
        "4",
        "--ahead-wait-ms",
        "0.5",
    )
    assert code == 0 and 'variant = "int8"' in lines and "fronts = 2" in lines
    assert "steps_ahead = 4" in lines and "ahead_wait_ms = 0.5" in lines
    assert chosen == [
        "# device cpu: set by the configuration",
        "# fronts 2: set by the configuration",
        "# workers 16: one per usable CPU core (16)",
        "# cache auto on cpu: written in place where a version ships that step, else growing",
        "# encoder inline: auto on cpu: each worker has a core, which a thread would share",
        "# step inline: " + step_choice("inline")[1],
        "# steps ahead 4: " + steps_ahead_choice(4, 0.5),
        "# variant int8 for captioner/1: set by the configuration",
        "# variant int8 for translator/1: set by the configuration",
    ]


def test_print_config_on_this_machine(capsys, monkeypatch, tmp_path):
    """No CUDA in the CPU onnxruntime the tests run on: cpu and fp32, and the output is
    still a configuration file (the choices are comments)."""
    import tomllib

    if "CUDAExecutionProvider" in onnxruntime.get_available_providers():
        pytest.skip("this onnxruntime has CUDA")
    root = _repository(tmp_path / "repository", translator_1=_manifest("fp32", "int8"))
    code, lines, chosen = _print_config(capsys, monkeypatch, "--repository", str(root))
    assert code == 0
    assert chosen[0].startswith("# device cpu: onnxruntime has no CUDAExecutionProvider")
    cores = usable_cores()
    assert chosen[1].startswith(f"# fronts {min(4, max(1, cores // 4))}: one per 4 of the {cores} ")
    assert chosen[2] == f"# workers {cores}: one per usable CPU core ({cores})"
    assert chosen[3:] == [
        "# cache auto on cpu: written in place where a version ships that step, else growing",
        "# encoder inline: auto on cpu: each worker has a core, which a thread would share",
        "# step inline: " + step_choice("inline")[1],
        "# steps ahead 1: " + steps_ahead_choice(1),
        "# variant fp32 for translator/1: the CPU default (int8 only when asked)",
    ]
    assert tomllib.loads("\n".join(lines))["variant"] == "auto"

    code, lines, chosen = _print_config(capsys, monkeypatch, "--repository", str(tmp_path / "no"))
    assert (
        code == 0 and chosen[7] == f"# no model version under {tmp_path / 'no'}: no variant chosen"
    )


def _cgroups(tmp_path, membership: str, files: dict[str, str]):
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "cgroup").write_text(membership)
    root = tmp_path / "sys"
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return cpu_quota(root, tmp_path / "proc" / "cgroup")


@pytest.mark.parametrize(
    ("membership", "files", "quota"),
    [
        ("0::/\n", {"cpu.max": "200000 100000\n"}, 2.0),  # a container's own namespace
        ("0::/\n", {"cpu.max": "max 100000\n"}, None),
        # nested: the parent's quota is the smaller
        ("0::/a/b\n", {"a/cpu.max": "150000 100000", "a/b/cpu.max": "400000 100000"}, 1.5),
        ("0::/a/b\n", {}, None),  # no cpu.max anywhere (the controller not enabled)
        # cgroup v1, and a hybrid host whose v1 cpu hierarchy sets the quota
        (
            "4:cpu,cpuacct:/\n",
            {"cpu,cpuacct/cpu.cfs_quota_us": "300000", "cpu,cpuacct/cpu.cfs_period_us": "100000"},
            3.0,
        ),
        (
            "1:cpu:/x\n0::/\n",
            {
                "cpu/x/cpu.cfs_quota_us": "-1",
                "cpu/x/cpu.cfs_period_us": "100000",
                "cpu/cpu.cfs_quota_us": "50000",
                "cpu/cpu.cfs_period_us": "100000",
            },
            0.5,
        ),
        ("1:memory:/\n", {"cpu/cpu.cfs_quota_us": "100000"}, None),  # no cpu controller line
        ("garbled\n0::/\n", {"cpu.max": "100000 100000"}, 1.0),  # a line that is no cgroup
    ],
)
def test_the_cgroup_cpu_quota_bounds_the_usable_cores(tmp_path, membership, files, quota):
    assert _cgroups(tmp_path, membership, files) == quota


def test_usable_cores_are_the_affinity_within_the_quota(monkeypatch):
    monkeypatch.setattr("os.sched_getaffinity", lambda _: set(range(16)))
    for quota, cores in ((None, 16), (2.0, 2), (2.5, 3), (0.5, 1), (64.0, 16)):
        monkeypatch.setattr(config_module, "cpu_quota", lambda q=quota: q)
        assert usable_cores() == cores, quota
    assert cpu_quota(membership=Path("/nonexistent/cgroup")) is None


@pytest.mark.parametrize(
    ("name", "choices", "threads"),
    [
        ("encoder", "auto, thread or inline", {"auto": (0, 1), "thread": (1, 1), "inline": (0, 0)}),
        ("step", "thread or inline", {"inline": (0, 0), "thread": (1, 1)}),
    ],
)
def test_where_the_encoder_and_the_step_run_is_validated_and_reaches_the_scheduler(
    name, choices, threads, monkeypatch
):
    """threads: choice -> (a thread on cpu, a thread on cuda)."""
    from service.front.pool import worker_settings
    from service.worker import settings
    from service.worker.settings import WorkerSettings

    with pytest.raises(InvalidArgument, match=f"{name} must be {choices}"):
        load_config(None, {f"ATTNSERVE_{name.upper()}": "process"})
    config = load_config(None, {}, {name: "thread"})
    assert getattr(worker_settings(config, (), "cpu", {})[0], name) == "thread"

    made = []  # the keywords each scheduler is made with
    monkeypatch.setattr(settings, "Scheduler", lambda *args, **keywords: made.append(keywords))
    attribute = f"{name}_thread"
    for choice, expected in threads.items():
        got = []
        for device in ("cpu", "cuda"):
            WorkerSettings(0, (), device=device, **{name: choice}).scheduler(engine=None)
            got.append(made.pop()[attribute])
        assert tuple(got) == tuple(map(bool, expected)), choice


def test_the_default_repository_is_the_one_the_set_up_builds():
    root = Path(__file__).resolve().parents[2]
    assert root / "data" / "repository" == config_module.DEFAULT_REPOSITORY
    assert ServerConfig().repository == config_module.DEFAULT_REPOSITORY


@pytest.mark.parametrize(
    ("toml", "named"),
    [
        ("workers = [1]", "workers"),
        ("max_batch_rows = {a = 1}", "max_batch_rows"),
        ("workers = 1.9", "workers"),  # an int, not a float cut to one
        ("workers = true", "workers"),
        ("max_versions = -0.5", "max_versions"),
        ("drain_seconds = [1]", "drain_seconds"),
        ("repository = 5", "repository"),
        ("io_binding = 1", "io_binding"),
        ("listen = 5", "listen"),
    ],
)
def test_a_toml_value_of_another_type_is_refused_naming_it(tmp_path, toml, named):
    file = tmp_path / "attnserve.toml"
    file.write_text(toml + "\n", encoding="utf-8")
    with pytest.raises(InvalidArgument, match=rf"configuration: {named}: cannot read"):
        load_config(file, {})


def test_numbers_a_server_cannot_keep_are_refused(tmp_path):
    """nan and infinities (a watch that never wakes, a drain that cuts every call, gRPC
    options that overflow), a negative batch window and a port past 65535."""
    for name in ("WATCH_SECONDS", "DRAIN_SECONDS", "MIN_PING_INTERVAL_SECONDS"):
        for value in ("nan", "inf", "-inf"):
            with pytest.raises(InvalidArgument, match="cannot read"):
                load_config(None, {f"ATTNSERVE_{name}": value})
    with pytest.raises(InvalidArgument, match="batch_window_ms must be 0 or more"):
        load_config(None, {"ATTNSERVE_BATCH_WINDOW_MS": "-1"})
    with pytest.raises(InvalidArgument, match="drain_seconds must be 0 or more"):
        load_config(None, {"ATTNSERVE_DRAIN_SECONDS": "-5"})
    with pytest.raises(InvalidArgument, match=r"listen must be HOST:PORT \(0..65535\)"):
        load_config(None, {"ATTNSERVE_LISTEN": "127.0.0.1:99999"})
    for steps in ("0", "9"):  # greedy steps run back to back: as many as a bucket binds
        with pytest.raises(InvalidArgument, match="steps_ahead must be 1 to 8"):
            load_config(None, {"ATTNSERVE_STEPS_AHEAD": steps})
    assert load_config(None, {"ATTNSERVE_STEPS_AHEAD": "8"}).steps_ahead == 8
    with pytest.raises(InvalidArgument, match="ahead_wait_ms must be 0 or more"):
        load_config(None, {"ATTNSERVE_AHEAD_WAIT_MS": "-1"})
    assert load_config(None, {"ATTNSERVE_AHEAD_WAIT_MS": "0"}).ahead_wait_ms == 0.0
    file = tmp_path / "attnserve.toml"
    file.write_text("drain_seconds = 5\nworkers = 2\nio_binding = true\n", encoding="utf-8")
    config = load_config(file, {})  # an int for a float is a number still
    assert (config.drain_seconds, config.workers, config.io_binding) == (5.0, 2, True)


def test_workers_of_this_machine_are_refused_with_ray_not_left_unused():
    with pytest.raises(InvalidArgument, match="workers must be 0 with ray: min_replicas and"):
        load_config(None, {"ATTNSERVE_RAY": "auto", "ATTNSERVE_WORKERS": "4"})
    config = load_config(None, {"ATTNSERVE_RAY": "auto", "ATTNSERVE_MIN_REPLICAS": "4"})
    assert config.worker_choice("cpu")[0] == 4  # the replicas count the workers
    assert load_config(None, {"ATTNSERVE_WORKERS": "4"}).worker_choice("cpu")[0] == 4


def test_ray_without_the_ray_extra_is_refused_not_a_traceback(monkeypatch):
    """Else `serve --ray` loaded the repository, listened, then stopped on an ImportError."""
    import importlib.util

    found = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name: None if name == "ray" else found(name)
    )
    with pytest.raises(InvalidArgument, match=r"ray needs the ray extra: pip install"):
        load_config(None, {"ATTNSERVE_RAY": "auto"})
    assert load_config(None, {}).ray == ""  # the single machine needs no Ray


def test_every_problem_of_a_configuration_is_named_at_once(tmp_path):
    """An unknown setting, values that cannot be read (file, environment, flag) and values
    out of range are refused together, not one per start."""
    file = tmp_path / "attnserve.toml"
    file.write_text('wrokers = 2\nworkers = "two"\nmax_batch_rows = 0\n', encoding="utf-8")
    environ = {"ATTNSERVE_IO_BINDING": "sometimes", "ATTNSERVE_DRAIN_SECONDS": "nan"}
    with pytest.raises(InvalidArgument) as refused:
        load_config(file, environ, {"listen": "nowhere", "fronts": "x"})
    message = str(refused.value)
    assert message.startswith("configuration: ")
    for named in (
        "unknown settings ['wrokers']",
        "workers: cannot read 'two'",
        "io_binding: cannot read 'sometimes'",
        "drain_seconds: cannot read 'nan'",
        "fronts: cannot read 'x'",
        "max_batch_rows must be 1 or more",
        "listen must be HOST:PORT (0..65535), got 'nowhere'",
    ):
        assert named in message


def test_the_http_root_path_is_a_path_without_a_trailing_slash():
    assert load_config(None, {"ATTNSERVE_HTTP_ROOT_PATH": "/attnserve/v2"}).http_root_path == (
        "/attnserve/v2"
    )
    for bad in ("attnserve", "/attnserve/", "/", "/a b", "/a?b", "/a%20b"):
        with pytest.raises(InvalidArgument, match=r"http_root_path must be '' or a path such as"):
            load_config(None, {"ATTNSERVE_HTTP_ROOT_PATH": bad})


def test_the_trusted_proxies_are_addresses_and_networks():
    loaded = load_config(None, {"ATTNSERVE_HTTP_TRUSTED_PROXIES": "10.0.0.0/8, ::1,192.168.1.2"})
    assert loaded.http_trusted_proxies == "10.0.0.0/8, ::1,192.168.1.2"
    for value in ("*", ""):
        assert load_config(None, {"ATTNSERVE_HTTP_TRUSTED_PROXIES": value})
    for value in ("10.0.0.0/8,proxy.local", "10.0.0.1,*"):
        with pytest.raises(InvalidArgument, match=r"http_trusted_proxies must be '\*', ''"):
            load_config(None, {"ATTNSERVE_HTTP_TRUSTED_PROXIES": value})
