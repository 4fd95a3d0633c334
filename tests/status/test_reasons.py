"""Failure reasons cleaned for people: what a witness generator prints reduced to its message lines.

The texts are what node and snarkjs print (captured from circom 2 circuits whose witness cannot be
computed: an input missing, one too many, an assertion that fails), as the engine passes them on:
``synthesis failed: witness generation failed: `` and the generator's output.
"""

from __future__ import annotations

import pytest

from prooflane.status.reasons import ELLIPSIS, readable_reason

PREFIX = "synthesis failed: witness generation failed: "

# node running circom's generate_witness.js: the place that threw, its source line and a caret, the message,
# the stack frames, node's version.
NODE_MISSING_INPUT = (
    "/srv/circuits/mul_js/witness_calculator.js:174\n"
    "\t    throw new Error(`Not all inputs have been set. Only ${input_counter} out of "
    "${this.instance.exports.getInputSize()}`);\n"
    "\t          ^\n"
    "\n"
    "Error: Not all inputs have been set. Only 1 out of 2\n"
    "    at WitnessCalculator._doCalculateWitness (/srv/circuits/mul_js/witness_calculator.js:174:12)\n"
    "    at WitnessCalculator.calculateWTNSBin (/srv/circuits/mul_js/witness_calculator.js:218:20)\n"
    "    at /srv/circuits/mul_js/generate_witness.js:16:38\n"
    "\n"
    "Node.js v20.20.2\n"
)
NODE_ASSERT = (
    "/srv/circuits/mul_js/witness_calculator.js:168\n"
    "                    throw new Error(err);\n"
    "                          ^\n"
    "\n"
    "Error: Error: Assert Failed.\n"
    "Error in template Mul_0 line: 7\n"
    "\n"
    "    at /srv/circuits/mul_js/witness_calculator.js:168:27\n"
    "    at Array.forEach (<anonymous>)\n"
    "    at WitnessCalculator._doCalculateWitness (/srv/circuits/mul_js/witness_calculator.js:143:14)\n"
    "    at process.processTicksAndRejections (node:internal/process/task_queues:95:5)\n"
    "\n"
    "Node.js v20.20.2\n"
)
NODE_TOO_MANY = (
    "\x1b[31m/srv/circuits/mul_js/witness_calculator.js:156\x1b[39m\n"
    "\t\tthrow new Error(`Too many values for input signal ${k}\\n`);\n"
    "\t\t      ^\n"
    "\n"
    "\x1b[31mError: Too many values for input signal c\x1b[39m\n"
    "\n"
    "    at /srv/circuits/mul_js/witness_calculator.js:156:9\n"
    "    at Array.forEach (<anonymous>)\n"
)
NODE_UNHANDLED = (
    "node:internal/process/promises:288\n"
    "            triggerUncaughtException(err, true /* fromPromise */);\n"
    "            ^\n"
    "\n"
    "Error: Not enough values for input signal b\n"
    "\n"
    "    at file:///srv/circuits/witness.mjs:40:11\n"
    "at async Promise.all (index 0)\n"
    "Node.js v18.19.1"
)
# The snarkjs CLI (`snarkjs wtns calculate`): its own colour codes, the frames, circom's error code line.
SNARKJS_MISSING_INPUT = (
    "\x1b[31;22m[ERROR] \x1b[39;1msnarkJS\x1b[0m: Error: Not all inputs have been set. Only 1 out of 2\n"
    "    at WitnessCalculatorCircom2._doCalculateWitness "
    "(/srv/node_modules/circom_runtime/build/main.cjs:535:19)\n"
    "    at async clProcessor (/srv/node_modules/snarkjs/build/cli.cjs:519:27)\n"
)


@pytest.mark.parametrize(
    ("output", "message"),
    [
        (NODE_MISSING_INPUT, "Error: Not all inputs have been set. Only 1 out of 2"),
        (NODE_ASSERT, "Error: Error: Assert Failed. Error in template Mul_0 line: 7"),
        (NODE_TOO_MANY, "Error: Too many values for input signal c"),
        (NODE_UNHANDLED, "Error: Not enough values for input signal b"),
        (SNARKJS_MISSING_INPUT, "[ERROR] snarkJS: Error: Not all inputs have been set. Only 1 out of 2"),
    ],
    ids=["node-missing-input", "node-assert", "node-too-many", "node-unhandled", "snarkjs-missing-input"],
)
def test_a_witness_error_reads_as_its_message(output: str, message: str) -> None:
    reason = readable_reason(PREFIX + output)
    # The first line says what failed and where in the circuit, after the caller's own prefix.
    assert reason == PREFIX + message + ELLIPSIS
    for gone in ("\x1b", "witness_calculator.js", "main.cjs", "node:internal", "Node.js v", "    at ", "^"):
        assert gone not in reason, gone


def test_message_lines_stay_and_only_the_trace_goes() -> None:
    reason = readable_reason(
        "job failed\nError: bad input\n  detail: signal b is 7\n    at f (/x.js:1:2)\n"
        "at least two inputs (got one)\nsee /var/log/prooflane/daemon.log:12"
    )
    assert reason == (
        "job failed\nError: bad input\ndetail: signal b is 7\nat least two inputs (got one)\n"
        "see /var/log/prooflane/daemon.log:12" + ELLIPSIS
    )


def test_a_python_traceback_reads_as_its_exception() -> None:
    text = (
        "Traceback (most recent call last):\n"
        '  File "/srv/prooflane/kinds.py", line 230, in synthesize_partition\n'
        "    witness = read_wtns(path)\n"
        "              ^^^^^^^^^^^^^^^\n"
        '  File "/srv/prooflane/groth16/wtns.py", line 41, in read_wtns\n'
        "    raise ValueError(msg)\n"
        "ValueError: not a .wtns file: bad magic\n"
    )
    assert readable_reason(text) == "ValueError: not a .wtns file: bad magic" + ELLIPSIS


def test_a_plain_reason_is_kept_as_it_is() -> None:
    for text in ("partition 0 did not verify", "worker cpu:0/w1 died: exit code -9", "a\nb"):
        assert readable_reason(text) == text
