"""Per-op checks of MoE deployments against AISimulate's own per-op evaluation, shared by
tests/test_moe_tp_dp.py, tests/test_moe_multinode.py and tests/test_mla_trtllm.py.

A golden file under tests/golden_optable/ lists deployments (model, backend, parallelism) with
prefill / decode shapes and, per op, AISimulate's (ms, energy W*ms). Latency is read through
`aisim estimate` (the CLI), energy through the energy pricer; 1e-9 relative.
"""

import json
import tempfile
from functools import cache
from pathlib import Path

import pytest
from click.testing import CliRunner

from aisim.cli import main

REL = 1e-9
VERSIONS = {"vllm": "0.24.0", "trtllm": "1.3.0rc20"}

CONFIG = """\
traffic:
  source: {{type: synthetic, input_tokens: 1024, output_tokens: 8}}
  load: {{type: concurrency, concurrency: 8}}
  stop: {{requests: 8}}
engine:
  mode: aggregated
  model: {model}
  hardware: b200_sxm
  backend: {backend}
  backend_version: "{version}"
  estimation_mode: op_level
  database_mode: SILICON
  fallback_policy: deny
  enable_shared_layer: true
  workers:
    aggregated:
      parallelism: {{replicas: 1, tensor: {tensor}, pipeline: 1, attention_data: {attention_data},
                    moe_tensor: {moe_tensor}, moe_expert: {moe_expert}}}
      scheduler: {{max_batched_tokens: 8192, max_sequences: 256}}
      kv_cache: {{block_size: 64, prefix_caching: true, capacity: {{type: fixed, blocks: 16384}}}}
      timing: {{type: default}}
"""


def _name(d: dict) -> str:
    return (
        f"{d['model'].split('/')[1]}-{d['backend']}-tp{d['tensor']}-dp{d['attention_data']}"
        f"-mtp{d['moe_tensor']}-ep{d['moe_expert']}"
    )


def _close(got: float, ref: float) -> bool:
    return abs(got - ref) <= REL * max(abs(ref), 1e-12)


class PerOpGolden:
    """The deployments of one golden file, their configs, and the two checks."""

    def __init__(self, golden_file: str, backend: str | None = None):
        """`backend` is for golden files whose deployments do not name theirs."""
        golden = json.loads((Path(__file__).parent / "golden_optable" / golden_file).read_text())
        deployments = [{"backend": backend, **d} for d in golden["deployments"]]
        self.deployments = {_name(d): d for d in deployments}
        self.config_path = cache(self._config_path)
        self.estimate = cache(self._estimate)

    def _config_path(self, name: str) -> str:
        d = self.deployments[name]
        path = Path(tempfile.mkdtemp(prefix="aisim-moe-per-op-")) / "cfg.yaml"
        path.write_text(CONFIG.format(version=VERSIONS[d["backend"]], **d))
        return str(path)

    def _estimate(self, name: str, kind: str) -> tuple:
        shapes = sorted(self.deployments[name][kind])
        args = [a for s in shapes for a in (f"--{kind}", s)]
        res = CliRunner().invoke(
            main, ["estimate", "-c", self.config_path(name), *args, "--format", "json"]
        )
        assert res.exit_code == 0, res.output
        passes = [p for p in json.loads(res.stdout)["passes"] if p["kind"] == kind]
        return tuple(zip(shapes, passes, strict=True))

    def latency_mismatches(self, name: str, kind: str) -> list[str]:
        bad = []
        for shape, got in self.estimate(name, kind):
            ref = self.deployments[name][kind][shape]
            ours = {op["op"]: op["ms"] for op in got["ops"]}
            assert set(ours) == set(ref), (shape, sorted(set(ours) ^ set(ref)))
            bad += [
                f"{shape} {op}: {ours[op]} vs {ms}"
                for op, (ms, _e) in ref.items()
                if not _close(ours[op], ms)
            ]
            total = sum(ms for ms, _e in ref.values())
            if not _close(got["total_ms"], total):
                bad.append(f"{shape} total: {got['total_ms']} vs {total}")
        return bad

    def energy_mismatches(self, name: str) -> list[str]:
        from aisim.config.load import load_config
        from aisim.engine.spec import resolve
        from aisim.timing.energy import EnergyPricer
        from aisim.timing.provider import plan_for

        pricer = EnergyPricer(plan_for(resolve(load_config(self.config_path(name))), "test"))
        names = pricer.plan.op_names
        bad = []
        for kind in ("prefill", "decode"):
            for shape, ref in self.deployments[name][kind].items():
                b, rest = shape.split("x")
                if kind == "prefill":
                    new, _, prefix = rest.partition("+")
                    pricer.prefill(int(b), int(new) + int(prefix or 0), int(prefix or 0))
                else:
                    pricer.decode(int(b), int(rest))
                for op, (_ms, energy) in ref.items():
                    got = float(pricer.energy_wms[names.index(op)])
                    if not _close(got, energy):
                        bad.append(f"{kind} {shape} {op}: {got} vs {energy}")
        return bad


def per_op_tests(golden: PerOpGolden):
    """The per-op latency and energy tests of one golden file, for a test module to bind:
    `test_per_op_latency, test_per_op_energy = per_op_tests(GOLDEN)`."""
    names = sorted(golden.deployments)

    @pytest.mark.golden
    @pytest.mark.parametrize("kind", ["prefill", "decode"])
    @pytest.mark.parametrize("name", names)
    def test_per_op_latency(name: str, kind: str) -> None:
        bad = golden.latency_mismatches(name, kind)
        assert not bad, "\n".join(bad)

    @pytest.mark.golden
    @pytest.mark.parametrize("name", names)
    def test_per_op_energy(name: str) -> None:
        bad = golden.energy_mismatches(name)
        assert not bad, "\n".join(bad)

    return test_per_op_latency, test_per_op_energy
