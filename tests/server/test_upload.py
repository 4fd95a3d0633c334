"""Uploads over real HTTP (the real app, uvicorn on a free port, the engine on the in-process backend): a
circuit's files and a job's witnesses sent in the body, streamed, digest-checked, limited and atomic; a
refused or cut upload leaves no file in the data folder."""

from __future__ import annotations

import hashlib
import socket
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from prooflane.client import Client, circuit_digest
from prooflane.config import Config
from prooflane.errors import DaemonError
from prooflane.groth16 import Proof, VerificationKey, verify
from prooflane.server.upload import MultipartReader, upload_refusal
from prooflane.states import JobState
from tests.support.daemons import circom_files
from tests.support.engine import Served, served, tiny_config

pytestmark = pytest.mark.timeout(120)
TOKEN = "upl0ad"


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A .zkey (tiny winning-post), a good and a bad .wtns of it, kept outside every allowed folder."""
    return circom_files(tmp_path_factory.mktemp("client-side"))


@pytest.fixture
def daemon(engine_config: Callable[..., Config]) -> Iterator[Served]:
    with served(engine_config(live_retention_secs=600.0), TOKEN) as running:
        yield running


@pytest.fixture
def client(daemon: Served) -> Iterator[Client]:
    with Client(daemon.url, TOKEN) as c:
        yield c


def left_in(data: Path) -> list[str]:
    """What uploads left in the data folder: circuit folders and witnesses (nothing else is theirs)."""
    found = [*(data / "circuits").glob("*"), *(data / "witnesses").glob("*")]
    return sorted(str(p.relative_to(data)) for p in found)


def until_clean(data: Path, keep: list[str]) -> list[str]:
    """What is left once the upload's clean-up ran (it runs as its request ends)."""
    for _ in range(200):
        if left_in(data) == keep:
            break
        time.sleep(0.05)
    return left_in(data)


def multipart(parts: list[tuple[str, bytes]], boundary: str = "b0undary") -> tuple[bytes, dict[str, str]]:
    body = b"".join(
        f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"; filename="f"\r\n\r\n'.encode()
        + data
        + b"\r\n"
        for name, data in parts
    )
    body += f"--{boundary}--\r\n".encode()
    return body, {
        "content-type": f"multipart/form-data; boundary={boundary}",
        "authorization": f"Bearer {TOKEN}",
    }


def test_a_circuit_uploaded_is_registered_once_with_its_digest(
    daemon: Served, client: Client, files: dict[str, Path]
) -> None:
    info = client.upload_circuit("wp", files["zkey"])
    assert info.digest == circuit_digest(files["zkey"]) == client.circuits()[0].digest
    assert client.upload_circuit("wp", files["zkey"]) == info  # the same again: the same circuit
    # curl -F sends the same upload: the daemon answers as registered (no second circuit)
    body, headers = multipart([("zkey", files["zkey"].read_bytes())])
    again = httpx.put(f"{daemon.url}/v1/circuits/wp", content=body, headers=headers)
    assert again.status_code == 201, again.text
    assert [c.name for c in client.circuits()] == ["wp"]
    other = files["zkey"].read_bytes()[:-1] + b"\x01"
    body, headers = multipart([("zkey", other)])
    taken = httpx.put(f"{daemon.url}/v1/circuits/wp", content=body, headers=headers)
    assert taken.status_code == 409, taken.text
    assert "registered with other files" in taken.json()["detail"]
    assert until_clean(daemon.engine.config.data_dir, ["circuits/wp"]) == ["circuits/wp"]


def test_witnesses_uploaded_are_proven_and_removed_once_the_job_ends(
    daemon: Served, client: Client, files: dict[str, Path]
) -> None:
    client.upload_circuit("wp", files["zkey"])
    job_id = client.submit_witnesses("wp", [files["good"], files["good"]], job_id="up-1")
    assert client.submit_witnesses("wp", [files["good"], files["good"]], job_id="up-1") == job_id
    assert daemon.done(job_id) is JobState.DONE
    key = VerificationKey.from_json(client.verification_key("circom", circuit="wp"))
    proof = client.proof(job_id)
    assert proof is not None and len(proof.partitions) == 2
    for part in proof.partitions:
        public = tuple(int(x) for x in part.public)
        assert verify(key, public, Proof.from_json(part.proof, public=public))
    data = daemon.engine.config.data_dir
    assert until_clean(data, ["circuits/wp"]) == ["circuits/wp"]  # the witnesses went with their job
    with pytest.raises(DaemonError) as other:
        client.submit_witnesses("wp", [files["bad"]], job_id="up-1")
    assert other.value.status == 409
    failed = client.submit_witnesses("wp", [files["bad"]])
    assert daemon.done(failed) is JobState.FAILED


@pytest.mark.parametrize(
    ("case", "status", "said"),
    [
        ("wrong digest", 422, "the upload's SHA-256"),
        ("garbage key", 422, "zkey 'uploaded'"),
        ("no zkey", 422, "expected a part 'zkey'"),
        ("wasm first", 422, "expected a part 'zkey' and then"),
        ("not multipart", 415, "multipart/form-data"),
        ("no token", 401, "bearer token"),
        ("declared too large", 413, "(max_circuit_bytes) are accepted"),
        ("chunked too large", 413, "(max_circuit_bytes) are accepted"),
    ],
)
def test_a_refused_upload_says_why_and_leaves_nothing(
    engine_config: Callable[..., Config], files: dict[str, Path], case: str, status: int, said: str
) -> None:
    zkey = files["zkey"].read_bytes()
    config = engine_config(max_circuit_bytes=len(zkey) + 8192)
    with served(config, TOKEN) as daemon:
        url = f"{daemon.url}/v1/circuits/c"
        params: dict[str, str] = {}
        body, headers = multipart([("zkey", zkey)])
        if case == "wrong digest":
            params["digest"] = hashlib.sha256(b"other").hexdigest()
        elif case == "garbage key":
            body, headers = multipart([("zkey", b"not a zkey" * 100)])
        elif case == "no zkey":
            body, headers = multipart([("other", b"x")])
        elif case == "wasm first":
            body, headers = multipart([("wasm", b"\0asm"), ("zkey", zkey)])
        elif case == "not multipart":
            headers["content-type"] = "application/octet-stream"
        elif case == "no token":
            del headers["authorization"]
        elif case == "declared too large":
            body, headers = multipart([("zkey", zkey + b"z" * (1 << 17))])

        def chunks() -> Iterator[bytes]:  # no length declared: the limit is met while it streams
            yield body[:-50]
            yield b"z" * (1 << 17)

        content: bytes | Iterator[bytes] = chunks() if case == "chunked too large" else body
        answer = httpx.put(url, params=params, content=content, headers=headers)
        assert answer.status_code == status, answer.text
        assert said in answer.json()["detail"]
        assert until_clean(config.data_dir, []) == []
        assert daemon.call(daemon.engine.circuits) == []


def test_a_cut_upload_leaves_nothing(daemon: Served, files: dict[str, Path]) -> None:
    body, headers = multipart([("zkey", files["zkey"].read_bytes())])
    parts = urlsplit(daemon.url)
    with socket.create_connection((parts.hostname, parts.port)) as sock:
        head = f"PUT /v1/circuits/cut HTTP/1.1\r\nhost: {parts.netloc}\r\ncontent-length: {len(body)}\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
        sock.sendall(head.encode() + body[: len(body) // 2])
        data = daemon.engine.config.data_dir
        for _ in range(200):  # the upload has begun: its folder is there
            if list((data / "circuits").glob(".incoming-*")):
                break
            time.sleep(0.05)
    assert until_clean(data, []) == []
    assert daemon.call(daemon.engine.circuits) == []


def test_a_witness_of_another_circuit_or_too_large_is_refused_and_nothing_kept(
    daemon: Served, client: Client, files: dict[str, Path], tmp_path: Path
) -> None:
    client.upload_circuit("wp", files["zkey"])
    big = tmp_path / "big.wtns"
    big.write_bytes(files["good"].read_bytes() + b"\0" * (1 << 20))
    with pytest.raises(DaemonError) as refused:
        client.submit_witnesses("wp", [files["good"], big])
    assert refused.value.status == 413 and "witnesses[1]" in refused.value.detail
    with pytest.raises(DaemonError) as unknown:
        client.submit_witnesses("nope", [files["good"]])
    assert unknown.value.status == 404
    assert until_clean(daemon.engine.config.data_dir, ["circuits/wp"]) == ["circuits/wp"]


@pytest.mark.parametrize(
    ("part", "said"),
    [
        (b"", "witnesses[1]: not a .wtns witness (an empty part"),
        (b"wtns", "witnesses[1]: not a .wtns witness (4 bytes"),
        (b"PK\x03\x04" + b"\0" * 5000, "witnesses[1]: not a .wtns witness (its first bytes"),
        (
            b"wtns" + b"\xff" * (1 << 20),
            "witnesses[1]: not a .wtns witness (its first bytes",
        ),  # refused at once
    ],
    ids=["empty", "cut", "another format", "a megabyte of other bytes"],
)
def test_a_part_that_is_no_witness_is_refused_as_it_arrives_and_nothing_kept(
    daemon: Served, client: Client, files: dict[str, Path], part: bytes, said: str
) -> None:
    client.upload_circuit("wp", files["zkey"])
    body, headers = multipart([("wtns", files["good"].read_bytes()), ("wtns", part)])
    answer = httpx.post(f"{daemon.url}/v1/circuits/wp/jobs", content=body, headers=headers)
    assert answer.status_code == 422, answer.text
    assert said in answer.json()["detail"]
    assert until_clean(daemon.engine.config.data_dir, ["circuits/wp"]) == ["circuits/wp"]
    assert httpx.get(f"{daemon.url}/v1/jobs", headers=headers).json() == []  # no job was made of it


def test_a_witness_of_another_circuit_is_refused_from_its_header(
    daemon: Served, client: Client, files: dict[str, Path]
) -> None:
    client.upload_circuit("wp", files["zkey"])
    wrong = bytearray(files["good"].read_bytes())
    wires = int.from_bytes(wrong[60:64], "little")  # after the magic, the section head, n8 and the prime
    wrong[60:64] = (wires + 1).to_bytes(4, "little")
    body, headers = multipart([("wtns", files["good"].read_bytes()), ("wtns", bytes(wrong))])
    answer = httpx.post(f"{daemon.url}/v1/circuits/wp/jobs", content=body, headers=headers)
    assert answer.status_code == 422, answer.text
    assert (
        f"witnesses[1]: this witness has {wires + 1:,} wires, the circuit {wires:,}"
        in answer.json()["detail"]
    )


def test_a_job_of_more_partitions_than_allowed_is_413_named_or_uploaded_and_nothing_kept(
    engine_config: Callable[..., Config], files: dict[str, Path]
) -> None:
    """200,000 empty parts once became a 200,000-partition job: the journal, the live view and every view of
    the job grew with it. A job holds at most ``max_partitions_per_job``, refused before it is journalled."""
    config = engine_config(max_partitions_per_job=2, live_retention_secs=600.0)
    with served(config, TOKEN) as daemon, Client(daemon.url, TOKEN) as client:
        client.upload_circuit("wp", files["zkey"])
        good = files["good"].read_bytes()
        body, headers = multipart([("wtns", good)] * 3)
        answer = httpx.post(f"{daemon.url}/v1/circuits/wp/jobs", content=body, headers=headers)
        assert answer.status_code == 413, answer.text
        assert "more than 2 partitions" in answer.json()["detail"]
        assert "(max_partitions_per_job)" in answer.json()["detail"]
        named = {"kind": "circom", "circuit": "wp", "witnesses": [str(files["good"])] * 3}
        answer = httpx.post(f"{daemon.url}/v1/jobs", json=named, headers={"authorization": f"Bearer {TOKEN}"})
        assert answer.status_code == 413 and "3 partitions" in answer.json()["detail"], answer.text
        assert until_clean(config.data_dir, ["circuits/wp"]) == ["circuits/wp"]
        assert httpx.get(f"{daemon.url}/v1/jobs", headers=headers).json() == []
        two = client.submit_witnesses("wp", [files["good"], files["good"]])  # at the bound: a job
        assert client.proof(two, wait=60) is not None


def test_uploads_beyond_loopback_need_a_token(engine_config: Callable[..., Config]) -> None:
    assert upload_refusal("127.0.0.1", False) is None
    assert upload_refusal("::1", False) is None
    assert upload_refusal("0.0.0.0", True) is None
    said = upload_refusal("0.0.0.0", False)
    assert said is not None and "set `token`" in said
    assert upload_refusal("prover1.lan", False) is not None
    with served(engine_config(host="0.0.0.0")) as daemon:  # served on 127.0.0.1, configured for all
        headers = {"content-type": "multipart/form-data; boundary=x"}
        answer = httpx.put(f"{daemon.url}/v1/circuits/c", content=b"--x--\r\n", headers=headers)
        assert answer.status_code == 403, answer.text
        assert "without a token" in answer.json()["detail"]


def test_a_full_disk_is_507_and_leaves_nothing(small_disk: Path, tmp_path: Path, keys_dir: Path) -> None:
    config = tiny_config(small_disk / "data", keys_dir)
    big = tmp_path / "big.zkey"
    big.write_bytes(b"\1" * (6 << 20))  # more than the disk holds
    with served(config, TOKEN) as daemon, Client(daemon.url, TOKEN) as client:
        with pytest.raises(DaemonError) as full:
            client.upload_circuit("c", big)
        assert full.value.status == 507
        assert "disk is full" in full.value.detail
        assert until_clean(config.data_dir, []) == []


@pytest.mark.anyio
@pytest.mark.parametrize("size", [1, 7, 50, 4096])
async def test_a_multipart_body_parses_whatever_its_chunks(size: int) -> None:
    boundary = "bnd"
    data = {"zkey": b"\r\n--bn" * 300 + b"z", "wasm": b"--bnd-ish\r\n\r\n-x" * 50}  # near misses
    body, _ = multipart(list(data.items()), boundary)

    async def chunks() -> AsyncIterator[bytes]:
        for i in range(0, len(body), size):
            yield body[i : i + size]

    got = {}
    async for name, part in MultipartReader(chunks(), boundary).parts():
        got[name] = b"".join([chunk async for chunk in part])
    assert got == data
