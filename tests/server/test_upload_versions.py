"""A witness of a ``.wtns`` version the reader does not take is refused from its first bytes (422
naming the version), over real HTTP on the real app; it was once accepted (202) and failed at synthesis."""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from prooflane.client import Client
from prooflane.config import Config
from prooflane.groth16 import read_wtns
from prooflane.groth16.errors import FormatError
from prooflane.kinds import WTNS_VERSION
from tests.support.daemons import circom_files
from tests.support.engine import Served, served

pytestmark = pytest.mark.timeout(120)
TOKEN = "versi0n"


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return circom_files(tmp_path_factory.mktemp("client-side"))


@pytest.fixture
def daemon(engine_config: Callable[..., Config]) -> Iterator[Served]:
    with served(engine_config(live_retention_secs=600.0), TOKEN) as running:
        yield running


def of_version(wtns: bytes, version: int) -> bytes:
    """The same witness, its header saying ``version``."""
    return wtns[:4] + struct.pack("<I", version) + wtns[8:]


def multipart(parts: list[bytes]) -> tuple[bytes, dict[str, str]]:
    body = b"".join(
        b'--b0undary\r\nContent-Disposition: form-data; name="wtns"; filename="w"\r\n\r\n' + part + b"\r\n"
        for part in parts
    )
    headers = {"content-type": "multipart/form-data; boundary=b0undary", "authorization": f"Bearer {TOKEN}"}
    return body + b"--b0undary--\r\n", headers


def test_the_version_uploads_take_is_the_one_the_reader_reads(files: dict[str, Path]) -> None:
    good = files["good"].read_bytes()
    assert struct.unpack_from("<I", good, 4)[0] == WTNS_VERSION  # what prooflane writes
    assert len(read_wtns("good", good)) > 0
    for other in (1, 3):
        with pytest.raises(FormatError, match=f"version {other}"):
            read_wtns("other", of_version(good, other))


@pytest.mark.parametrize("version", [1, 3])
def test_a_witness_of_another_version_is_refused_at_once_and_nothing_kept(
    daemon: Served, files: dict[str, Path], version: int
) -> None:
    with Client(daemon.url, TOKEN) as client:
        client.upload_circuit("wp", files["zkey"])
    good = files["good"].read_bytes()
    # A megabyte more after it: the refusal comes from its first bytes, not once the body is in.
    body, headers = multipart([good, of_version(good, version) + b"\0" * (1 << 20)])
    answer = httpx.post(f"{daemon.url}/v1/circuits/wp/jobs", content=body, headers=headers, timeout=60)
    assert answer.status_code == 422, answer.text
    detail = answer.json()["detail"]
    assert f"witnesses[1]: a .wtns file of version {version}: prooflane reads version 2" in detail
    assert httpx.get(f"{daemon.url}/v1/jobs", headers=headers).json() == []  # no job was made of it
    data = daemon.engine.config.data_dir
    assert not [*(data / "witnesses").glob("*")]


def test_a_witness_of_the_version_read_is_taken(daemon: Served, files: dict[str, Path]) -> None:
    with Client(daemon.url, TOKEN) as client:
        client.upload_circuit("wp", files["zkey"])
        job_id = client.submit_witnesses("wp", [files["good"]])
        assert client.proof(job_id, wait=60) is not None


def test_a_named_witness_of_another_version_is_refused_at_submission(
    daemon: Served, files: dict[str, Path], tmp_path: Path
) -> None:
    """The same rule for a .wtns named by its path (it was refused only when uploaded)."""
    old = daemon.engine.config.data_dir / "old.wtns"
    old.write_bytes(of_version(files["good"].read_bytes(), 1))
    with Client(daemon.url, TOKEN) as client:
        client.upload_circuit("wp", files["zkey"])
        answer = httpx.post(
            f"{daemon.url}/v1/jobs",
            json={"kind": "circom", "circuit": "wp", "witnesses": [str(old)]},
            headers={"authorization": f"Bearer {TOKEN}"},
        )
        assert answer.status_code == 422, answer.text
        assert (
            f"witnesses[0] '{old}': a .wtns file of version 1: prooflane reads version 2"
            in answer.json()["detail"]
        )
        assert client.jobs() == []
