"""The BN254 base-field product by throughput: the C core's 4-limb Montgomery product (mulx/adcx/adox) against
an 8-lane product in radix 2^52 with AVX-512 IFMA (field_product.c says how; csrc/ifma.h uses that product).

The MSMs spend most of their time in the field product (``perf``: 63% of a G1 MSM's samples in
``fqbn_mul`` and ``fqbn_sqr`` at 2^16), so this says how much faster an MSM built on IFMA products could
be on a CPU that has them, before the cost of moving points between the two forms. Each way runs 8
independent chains of products (throughput, not latency); every IFMA lane is checked against the core's
product on 2,000 x 8 random inputs first. Compiled here with the system's C compiler (``cc -O3``; the IFMA
functions carry their own target attribute and run only where the CPU has IFMA), run ``--repeat`` times;
medians.
Writes benchmarks/results/bench_field_product.json. Asserts nothing.

Usage: python benchmarks/bench_field_product.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import print_table, write_json

HERE = Path(__file__).resolve().parent
CSRC = HERE.parent / "src" / "prooflane" / "groth16" / "csrc"


def build(out: Path) -> Path:
    """The probe's binary (its IFMA functions carry their own target attribute: no global flags)."""
    cc = os.environ.get("CC") or shutil.which("cc") or "gcc"
    subprocess.run(
        [cc, "-O3", "-pthread", f"-I{CSRC}", str(HERE / "field_product.c"), "-o", str(out)], check=True
    )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="field-product-") as tmp:
        binary = build(Path(tmp) / "field_product")
        runs: list[dict[str, Any]] = []
        for _ in range(args.repeat):
            done = subprocess.run([str(binary)], capture_output=True, text=True, check=True)
            runs.append(json.loads(done.stdout))
    out: dict[str, Any] = {"repeat": args.repeat, "ifma": bool(runs[0].get("ifma")), "runs": runs}
    rows: list[list[object]] = []
    core = statistics.median(r["core_product_ns"] for r in runs)
    out["core_product_ns"] = core
    rows.append(["core: 4 limbs, mulx/adcx/adox (in use)", f"{core:.2f}", "1.00x", "-"])
    if runs[0].get("ifma"):
        for field, title in (
            ("ifma_lazy_ns", "IFMA, 8 lanes, below 2q"),
            ("ifma_full_ns", "IFMA, 8 lanes, below q"),
        ):
            value = statistics.median(r[field] for r in runs)
            out[field] = value
            rows.append(
                [title, f"{value:.2f}", f"{core / value:.2f}x", all(r["ifma_equal_to_core"] for r in runs)]
            )
    print_table(["product (BN254 Fq)", "ns a product", "throughput vs core", "equal to the core's"], rows)
    if not runs[0].get("ifma"):
        print("no AVX-512 IFMA here (compiler or CPU): the core's product only")
    write_json("bench_field_product", out)


if __name__ == "__main__":
    main()
