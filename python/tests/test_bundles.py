"""Kernel bundles on the CPU (NVRTC from pip, no GPU): record → build → info → load, with
parameter inspection in a process where NVRTC cannot be loaded; damaged, other-version
and other-architecture bundles; two processes recording into one manifest. The bundle is
also read here with the standard library only, as docs/bundles.md describes it."""

from __future__ import annotations

import hashlib
import json
import os
import struct
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Any

import pytest
from conftest import nvrtc_missing

import caijit

TEMPLATE = r"""
template <typename T> __global__ void axpy_t(T a, const T* x, T* y, long long n) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
extern "C" __global__ void scale_c(float* __restrict__ v, float s, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) v[i] *= s;
}
"""

# Prints the parameters of each instance named on the command line ("scale_c" is the
# extern "C" kernel), as JSON; with --compile also where compile() found it.
INSPECT = r"""
import json, sys, caijit
src = open(sys.argv[1]).read()
out = {}
for name in sys.argv[2:]:
    k = caijit.kernel(src, "scale_c") if name == "scale_c" else caijit.kernel(src, "axpy_t").specialize(name)
    out[name] = {"params": k.params, "cache": k.compile(arch="sm_90")[0]["cache"]}
maps = open("/proc/self/maps").read()
out["nvrtc_loaded"] = "libnvrtc" in maps
print(json.dumps(out))
"""

NO_NVRTC = {"CAIJIT_NVRTC_PATH": "/nonexistent/libnvrtc.so", "CAIJIT_ARCH": "sm_90"}


pytestmark = pytest.mark.skipif(nvrtc_missing() is not None, reason=str(nvrtc_missing()))


def python(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if k not in ("CAIJIT_RECORD", "CAIJIT_BUNDLES")}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=300, env={**full, **env}, cwd=cwd)


def inspect(tmp: Path, names: list[str], **env: str) -> dict[str, Any]:
    (tmp / "inspect.py").write_text(INSPECT)
    (tmp / "k.cu.txt").write_text(TEMPLATE)
    r = python(["inspect.py", "k.cu.txt", *names], env, tmp)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def cli(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return python(["-m", "caijit", *args], {}, tmp)


@pytest.fixture(scope="module")
def baked(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """A manifest recorded by one run and the bundle built from it (sm_80, sm_90 + PTX)."""
    tmp = tmp_path_factory.mktemp("bundle")
    ref = inspect(tmp, ["float", "double", "scale_c"], CAIJIT_RECORD=str(tmp / "manifest.json"))
    r = cli(tmp, "bundle", "build", "manifest.json", "--arch", "sm_80,sm_90", "-o", "app.caijit")
    assert r.returncode == 0, r.stderr
    # One source: its three recorded programs are compiled as one.
    assert "wrote app.caijit: 3 programs as 1 for sm_80, sm_90" in r.stdout
    return tmp, ref


def test_record_build_info_load_round_trip_without_nvrtc(baked: tuple[Path, dict[str, Any]]) -> None:
    tmp, ref = baked
    lines = (tmp / "manifest.json").read_text().splitlines()
    entries = [json.loads(line) for line in lines]
    assert {tuple(e["name_expressions"]) for e in entries} == {("axpy_t<float>",), ("axpy_t<double>",), ()}
    assert all(e["caijit_manifest"] == 1 and e["source"] == TEMPLATE for e in entries)
    info = cli(tmp, "bundle", "info", "app.caijit")
    assert info.returncode == 0, info.stderr
    assert "architectures: sm_80, sm_90" in info.stdout
    assert "kernel axpy_t<double>(double a @0+8, const double* x @8+8, double* y @16+8, long long n @24+8)" in info.stdout
    assert "kernel scale_c(float* v @0+8, float s @8+4, int n @12+4)" in info.stdout
    # NVRTC cannot be loaded: every instance's parameters come from the bundle.
    got = inspect(tmp, ["float", "double", "scale_c"], CAIJIT_BUNDLES=str(tmp / "app.caijit"), **NO_NVRTC)
    assert got.pop("nvrtc_loaded") is False
    for name in ("float", "double", "scale_c"):
        assert got[name]["params"] == ref[name]["params"], name
        assert got[name]["cache"] == "bundle"
    # caijit.load_bundle() does what CAIJIT_BUNDLES does.
    code = (
        "import caijit, json; s = caijit.load_bundle('app.caijit'); "
        "k = caijit.kernel(open('k.cu.txt').read(), 'axpy_t').specialize('float'); "
        "print(json.dumps([s['archs'], sorted(set(s['kernels'])), k.params[1]['type']]))"
    )
    r = python(["-c", code], NO_NVRTC, tmp)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == [["sm_80", "sm_90"], ["axpy_t<double>", "axpy_t<float>", "scale_c"], "const float*"]


def test_a_miss_without_nvrtc_names_the_instance_the_bundles_and_the_remedy(baked: tuple[Path, dict[str, Any]]) -> None:
    tmp, _ = baked
    code = "import caijit; caijit.kernel(open('k.cu.txt').read(), 'axpy_t').specialize('int').params"
    r = python(["-c", code], {"CAIJIT_BUNDLES": str(tmp / "app.caijit"), **NO_NVRTC}, tmp)
    assert r.returncode != 0
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("caijit.errors.BundleError: no loaded bundle holds the kernel instance"), last
    for part in ("axpy_t<int>", "app.caijit", "CAIJIT_RECORD=manifest.json", "bundle build", "NVRTC is not available"):
        assert part in last, (part, last)


def test_a_device_without_code_in_the_bundle_is_an_error_naming_what_it_has(baked: tuple[Path, dict[str, Any]]) -> None:
    tmp, _ = baked
    code = "import caijit; print(caijit.kernel(open('k.cu.txt').read(), 'axpy_t').specialize('float').compile(arch=ARCH)[0]['image'])"
    env = {"CAIJIT_BUNDLES": str(tmp / "app.caijit"), **NO_NVRTC}
    older = python(["-c", code.replace("ARCH", "'sm_75'")], env, tmp)
    assert "BundleError" in older.stderr and "no code for this device's architecture sm_75" in older.stderr, older.stderr
    assert "(it has: sm_80, sm_90, PTX for compute_90)" in older.stderr
    # A newer device gets the PTX (the driver compiles it); a minor revision the CUBIN.
    assert python(["-c", code.replace("ARCH", "'sm_100'")], env, tmp).stdout.strip() == "ptx"
    assert python(["-c", code.replace("ARCH", "'sm_86'")], env, tmp).stdout.strip() == "cubin"


def read_sections(data: bytes) -> tuple[int, list[tuple[int, int, bytes, int]]]:
    """docs/bundles.md's format, read (and every checksum verified) with the standard library."""
    assert data[:8] == b"CAIJITBN"
    version, count = struct.unpack_from("<II", data, 8)
    toc_end = 16 + 36 * count
    assert struct.unpack_from("<I", data, toc_end) == (zlib.crc32(data[:toc_end]),)
    at, sections = toc_end + 4, []
    for i in range(count):
        kind, flags, offset, stored, length, crc = struct.unpack_from("<IIQQQI", data, 16 + 36 * i)
        assert offset == at and zlib.crc32(data[at : at + stored]) == crc
        sections.append((kind, flags, data[at : at + stored], length))
        at += stored
    assert at == len(data)
    return version, sections


def write_sections(version: int, sections: list[tuple[int, int, bytes, int]]) -> bytes:
    toc, offset = bytearray(b"CAIJITBN" + struct.pack("<II", version, len(sections))), 16 + 36 * len(sections) + 4
    for kind, flags, stored, length in sections:
        toc += struct.pack("<IIQQQI", kind, flags, offset, len(stored), length, zlib.crc32(stored))
        offset += len(stored)
    return bytes(toc + struct.pack("<I", zlib.crc32(toc)) + b"".join(s for _, _, s, _ in sections))


def inflated(section: tuple[int, int, bytes, int]) -> bytes:
    _, flags, stored, length = section
    raw = zlib.decompress(stored, -15) if flags & 1 else stored
    assert len(raw) == length
    return raw


def program_records(sections: list[tuple[int, int, bytes, int]]) -> list[dict[str, Any]]:
    """Each program's record, in order, as the lookup table (section 1) numbers them."""
    table = inflated(sections[1])
    (count,) = struct.unpack_from("<I", table, 0)
    records = [struct.unpack_from("<I", table, 8 + 4 * i)[0] for i in range(count)]
    assert all(sections[r][0] == 7 for r in records)
    return [json.loads(inflated(sections[r])) for r in records]


def test_the_format_is_readable_without_caijit(baked: tuple[Path, dict[str, Any]]) -> None:
    tmp, _ = baked
    version, sections = read_sections((tmp / "app.caijit").read_bytes())
    assert version == 4
    meta = json.loads(inflated(sections[0]))
    assert sections[0][0] == 1 and meta["caijit"] == caijit.__version__ and meta["archs"] == [80, 90]
    # The lookup table: three sorted lists of (digest, program number, u32 big-endian).
    table = inflated(sections[1])
    assert sections[1][0] == 6
    p, m = struct.unpack_from("<II", table, 0)
    assert p == meta["programs"] and len(table) == 8 + 76 * p + 68 * m
    at = 8 + 4 * p
    keys = [table[at + 36 * i : at + 36 * (i + 1)] for i in range(p)]
    families = [table[at + 36 * (p + i) : at + 36 * (p + i + 1)] for i in range(p)]
    at += 72 * p
    exprs = [table[at + 68 * i : at + 68 * (i + 1)] for i in range(m)]

    def sha(text: str) -> bytes:
        return hashlib.sha256(text.encode()).digest()

    def number(i: int) -> bytes:
        return struct.pack(">I", i)

    want_keys, want_families, want_exprs = [], [], set()
    for i, record in enumerate(program_records(sections)):
        want_keys.append(sha(record["key"]) + number(i))
        want_families.append(sha(record["family"]) + number(i))
        want_exprs |= {sha(record["family"]) + sha(e) + number(i) for e in record["name_expressions"]}
        assert sections[record["description_section"]][0] == 5
        description = json.loads(inflated(sections[record["description_section"]]))
        assert description["key"] == record["key"] and [k["name"] for k in description["kernels"]] == record["kernels"]
        for image in record["images"]:
            raw = inflated(sections[image["section"]])
            assert raw.startswith(b"\x7fELF") if image["kind"] == "cubin" else b".target sm_90" in raw
    assert (keys, families, exprs) == (sorted(want_keys), sorted(want_families), sorted(want_exprs))


def load_error(tmp: Path, data: bytes) -> str:
    (tmp / "bad.caijit").write_bytes(data)
    r = python(["-c", "import caijit; caijit.load_bundle('bad.caijit')"], NO_NVRTC, tmp)
    assert r.returncode != 0
    return r.stderr.strip().splitlines()[-1]


def test_damaged_and_other_version_bundles_are_clear_errors(baked: tuple[Path, dict[str, Any]]) -> None:
    tmp, _ = baked
    good = (tmp / "app.caijit").read_bytes()
    flipped = bytearray(good)
    flipped[20] ^= 0x40  # in the table of contents
    cases = {
        "corrupt (the CRC-32 checksum of its table of contents does not match": bytes(flipped),
        "is truncated": good[: len(good) // 2],
        "is not a caijit bundle": b"\x7fELF" + good[4:],
        "has format version 3; this caijit": good[:8] + struct.pack("<I", 3) + good[12:],
        "has format version 5; this caijit": good[:8] + struct.pack("<I", 5) + good[12:],
    }
    version, sections = read_sections(good)
    kind, flags, stored, _ = sections[0]
    meta = json.loads(inflated(sections[0]))
    meta["caijit"] = "0.0.1"
    raw = json.dumps(meta).encode()
    cases["was built by caijit 0.0.1; this is caijit"] = write_sections(version, [(kind, 0, raw, len(raw)), *sections[1:]])
    for expected, data in cases.items():
        err = load_error(tmp, data)
        assert err.startswith("caijit.errors.BundleError: bundle bad.caijit") and expected in err, (expected, err)
    # Through CAIJIT_BUNDLES: the first compilation says so.
    (tmp / "bad.caijit").write_bytes(good[:100])
    r = python(["-c", "import caijit; caijit.kernel('__global__ void k(int* x) {}').params"], {"CAIJIT_BUNDLES": "bad.caijit"}, tmp)
    assert "BundleError: CAIJIT_BUNDLES: bundle bad.caijit is truncated" in r.stderr, r.stderr


def damaged_sm90_cubin(good: bytes) -> tuple[int, bytes]:
    """The number of the first program's sm_90 CUBIN section, and `good` with that section's
    first stored byte flipped."""
    _, sections = read_sections(good)
    sm90 = next(i["section"] for i in program_records(sections)[0]["images"] if i["arch"] == 90 and i["kind"] == "cubin")
    (offset,) = struct.unpack_from("<Q", good, 16 + 36 * sm90 + 8)
    data = bytearray(good)
    data[offset] ^= 1
    return sm90, bytes(data)


def test_a_damaged_section_is_found_when_it_is_used(baked: tuple[Path, dict[str, Any]]) -> None:
    """Loading checks the table of contents, the metadata and the lookup table; a program's sections are checked
    when one of its instances is first looked up (and by `bundle info`)."""
    tmp, _ = baked
    sm90, data = damaged_sm90_cubin((tmp / "app.caijit").read_bytes())
    (tmp / "bad.caijit").write_bytes(data)
    code = "import caijit; print(caijit.kernel(open('k.cu.txt').read(), 'axpy_t').specialize('float').compile(arch=ARCH)[0]['image'])"
    env = {"CAIJIT_BUNDLES": "bad.caijit", **NO_NVRTC}
    assert python(["-c", code.replace("ARCH", "'sm_86'")], env, tmp).stdout.strip() == "cubin"  # sm_80's CUBIN: intact
    r = python(["-c", code.replace("ARCH", "'sm_90'")], env, tmp)
    assert f"is corrupt (the CRC-32 checksum of section {sm90} does not match its contents)" in r.stderr, r.stderr
    info = cli(tmp, "bundle", "info", "bad.caijit")
    assert info.returncode != 0 and f"checksum of section {sm90}" in info.stderr, info.stderr


RECORDER = r"""
import sys, caijit
src = open(sys.argv[1]).read()
with caijit.record(sys.argv[2]):
    for i in range(int(sys.argv[3]), int(sys.argv[3]) + 40):
        caijit.kernel(src.replace("SLOT", str(i)), "axpy_t").specialize("float").params
"""


def test_two_processes_recording_into_one_manifest_lose_nothing(tmp_path: Path) -> None:
    (tmp_path / "rec.py").write_text(RECORDER)
    (tmp_path / "k.txt").write_text("// SLOT\n" + TEMPLATE)
    procs = [
        subprocess.Popen(
            [sys.executable, "rec.py", "k.txt", "m.json", str(start)], cwd=tmp_path, stderr=subprocess.PIPE, text=True,
            env={k: v for k, v in os.environ.items() if k != "CAIJIT_RECORD"},
        )
        for start in (0, 1000)
    ]
    for p in procs:
        assert p.wait(timeout=600) == 0, p.stderr.read() if p.stderr else ""
    lines = (tmp_path / "m.json").read_text().splitlines()
    slots = sorted(int(json.loads(line)["source"].split("\n", 1)[0][3:]) for line in lines)
    assert slots == [*range(0, 40), *range(1000, 1040)]


def test_a_shipped_bundle_that_cannot_be_used_is_skipped_with_a_warning(tmp_path: Path) -> None:
    (tmp_path / "bad.caijit").write_bytes(b"CAIJITBN" + bytes(40))
    code = "import caijit; caijit._native.add_default_bundle('bad.caijit'); print(caijit.kernel('__global__ void k(int* x) {}').params[0]['type'])"
    r = python(["-c", code], {}, tmp_path)
    assert r.returncode == 0 and r.stdout.strip() == "int*", r.stderr
    assert "warning: not using a shipped kernel bundle: bundle bad.caijit" in r.stderr


def damaged_record(good: bytes) -> bytes:
    """`good` with one byte of its first program record flipped (its CRC-32 no longer matches)."""
    _, sections = read_sections(good)
    index = next(i for i, s in enumerate(sections) if s[0] == 7)
    (offset,) = struct.unpack_from("<Q", good, 16 + 36 * index + 8)
    data = bytearray(good)
    data[offset + 3] ^= 0x20
    return bytes(data)


def test_a_load_that_raises_loads_nothing(baked: tuple[Path, dict[str, Any]]) -> None:
    """A bundle with a damaged program record is refused whole, by `load_bundle` and in
    CAIJIT_BUNDLES: later compilations neither use it nor fail naming it."""
    tmp, _ = baked
    (tmp / "damaged.caijit").write_bytes(damaged_record((tmp / "app.caijit").read_bytes()))
    code = r"""
import caijit, json
out = {}
try:
    caijit.load_bundle("damaged.caijit")
    out["load"] = "loaded"
except caijit.BundleError as e:
    out["load"] = "BundleError"
out["loaded"] = [b["path"] for b in caijit.bundles.loaded_bundles()]
out["cache"] = caijit.kernel(open("k.cu.txt").read(), "axpy_t").specialize("float").compile(arch="sm_90")[0]["cache"]
print(json.dumps(out))
"""
    r = python(["-c", code], {"CAIJIT_CACHE": "0", "CAIJIT_ARCH": "sm_90"}, tmp)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {"load": "BundleError", "loaded": [], "cache": "compiled"}
    r = python(["-c", "import caijit; caijit.kernel('__global__ void k(int* x) {}').params"], {"CAIJIT_BUNDLES": "damaged.caijit"}, tmp)
    assert "BundleError: CAIJIT_BUNDLES: bundle damaged.caijit is corrupt" in r.stderr, r.stderr


def test_a_bundle_that_cannot_serve_a_program_is_passed_over_with_a_warning(baked: tuple[Path, dict[str, Any]]) -> None:
    """With NVRTC at hand, a damaged CUBIN of a program the bundle holds is named in a warning
    and counted, and the program is compiled; without NVRTC it is an error."""
    tmp, _ = baked
    (tmp / "cubin.caijit").write_bytes(damaged_sm90_cubin((tmp / "app.caijit").read_bytes())[1])
    code = (
        "import caijit, json; d = caijit.kernel(open('k.cu.txt').read(), 'axpy_t').specialize('float').compile(arch='sm_90')[0];"
        " print(json.dumps([d['cache'], caijit.stats()['bundle_skips']]))"
    )
    r = python(["-c", code], {"CAIJIT_BUNDLES": "cubin.caijit", "CAIJIT_CACHE": "0"}, tmp)
    assert r.returncode == 0 and json.loads(r.stdout) == ["compiled", 1], r.stderr
    assert "warning: not using the bundle cubin.caijit for" in r.stderr and "CRC-32" in r.stderr, r.stderr


def test_a_bundle_path_that_is_not_a_regular_file_is_an_error_not_a_hang(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo.caijit")
    (tmp_path / "dir.caijit").mkdir()
    for name, what in (("fifo.caijit", "a FIFO"), ("dir.caijit", "a directory")):
        for args in (
            ["-m", "caijit", "bundle", "info", name],
            ["-c", f"import caijit; caijit.load_bundle({name!r})"],
            ["-c", "import caijit; caijit.kernel('__global__ void k(int* x) {}').params"],
        ):
            env = {"CAIJIT_BUNDLES": name} if "params" in args[-1] else {}
            r = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=60, cwd=tmp_path,
                               env={**{k: v for k, v in os.environ.items() if not k.startswith("CAIJIT_")}, **env})
            assert r.returncode != 0 and f"bundle {name} is {what}, not a regular file" in r.stderr, (args, r.stderr)


def test_a_source_manifest_or_cache_entry_that_is_not_a_regular_file_is_an_error_not_a_hang(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "k.cu")
    os.mkfifo(tmp_path / "m.json")
    (tmp_path / "zero.cu").symlink_to("/dev/zero")
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("CAIJIT_")}, "CAIJIT_CACHE_DIR": str(tmp_path / "cache")}
    for args, said in (
        (["-c", "import caijit; caijit.kernel('k.cu')"], "k.cu: is a FIFO, not a CUDA source file"),
        (["-m", "caijit", "bundle", "build", "k.cu", "--arch", "sm_90", "-o", "b.caijit"], "k.cu: is a FIFO"),
        (["-m", "caijit", "bundle", "build", "m.json", "--arch", "sm_90", "-o", "b.caijit"], "the manifest m.json is a FIFO, not a regular file"),
        (["-c", "import caijit; caijit.kernel('zero.cu')"], "zero.cu: is a device, not a CUDA source file"),
    ):
        r = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=60, cwd=tmp_path, env=env)
        assert r.returncode != 0 and said in r.stderr, (args, r.stderr[-2000:])
    # A disk-cache entry that is a FIFO is passed over: the program is compiled again.
    if nvrtc_missing() is None:
        code = "import caijit; caijit._native.compile_program('__global__ void fifo_entry(int* x) {}', 'sm_90'); print(caijit.stats()['compiles'])"
        first = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)
        assert first.returncode == 0, first.stderr
        entries = list((tmp_path / "cache").rglob("*.cubin-entry"))
        assert entries, list((tmp_path / "cache").rglob("*"))
        for e in entries:
            e.unlink()
            os.mkfifo(e)
        again = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=tmp_path, env=env)
        assert again.returncode == 0 and again.stdout.strip() == "1", again.stdout + again.stderr


def test_the_bundles_of_caijit_bundles_come_first_whatever_is_loaded_first(baked: tuple[Path, dict[str, Any]]) -> None:
    tmp, _ = baked
    (tmp / "copy.caijit").write_bytes((tmp / "app.caijit").read_bytes())
    code = "import caijit, json; caijit.load_bundle('copy.caijit'); print(json.dumps([b['path'] for b in caijit.bundles.loaded_bundles()]))"
    r = python(["-c", code], {"CAIJIT_BUNDLES": "app.caijit", "CAIJIT_PACKAGED_BUNDLE": "0"}, tmp)
    assert r.returncode == 0 and json.loads(r.stdout) == ["app.caijit", "copy.caijit"], r.stderr


def test_a_plain_kernel_beside_a_template_means_the_same_with_a_bundle_of_an_instance(tmp_path: Path) -> None:
    """A bundle holding `k<float>` serves `k<float>` and changes nothing of the plain `k`
    beside it (another program of the same source)."""
    (tmp_path / "k.cu").write_text("__global__ void k(int* x) { *x = 1; }\ntemplate <typename T> __global__ void k(T* x) { *x = 2; }\n")
    r = python(["-c", "import caijit; caijit.kernel('k.cu', 'k<float>').params"], {"CAIJIT_RECORD": "m.json"}, tmp_path)
    assert r.returncode == 0, r.stderr
    assert cli(tmp_path, "bundle", "build", "m.json", "--arch", "sm_90", "-o", "b.caijit").returncode == 0
    code = "import caijit, json; k = caijit.kernel('k.cu', 'k'); print(json.dumps([[p['type'] for p in k.params], [d['lowered_name'] for d in k.compile('sm_90')]]))"
    for env in ({}, {"CAIJIT_BUNDLES": "b.caijit"}, {"CAIJIT_BUNDLES": "b.caijit", **NO_NVRTC, "CAIJIT_CACHE": "0"}):
        r = python(["-c", code], {"CAIJIT_ARCH": "sm_90", **env}, tmp_path)
        assert r.returncode == 0 and json.loads(r.stdout) == [["int*"], ["_Z1kPi"]], (env, r.stderr)


def test_bundle_build_refuses_a_job_count_below_one(tmp_path: Path) -> None:
    (tmp_path / "k.cu").write_text('extern "C" __global__ void k(int* x) {}\n')
    r = cli(tmp_path, "bundle", "build", "k.cu", "--arch", "sm_90", "-j", "-2", "-o", "b.caijit")
    assert r.returncode == 2 and "'-2' is not a whole number of at least 1" in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_recording_a_program_with_a_non_utf8_include_directory_warns_and_compiles(tmp_path: Path) -> None:
    odd = os.fsdecode(bytes(tmp_path) + b"/inc\xff")
    os.makedirs(odd)
    (tmp_path / "k.cu").write_text('extern "C" __global__ void k(int* x) {}\n')
    code = f"import caijit; print(caijit.kernel('k.cu', include_dirs=[{odd!r}]).params[0]['type'])"
    r = python(["-c", code], {"CAIJIT_RECORD": "m.json", "CAIJIT_CACHE": "0"}, tmp_path)
    assert r.returncode == 0 and r.stdout.strip() == "int*", r.stderr
    assert "warning: not recording k.cu: the directory" in r.stderr and "is not UTF-8" in r.stderr, r.stderr
