"""The command line: demo, info and compile work without a GPU."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from conftest import gpu_unavailable_reason, nvrtc_missing

import caijit

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "caijit", *args], capture_output=True, text=True, timeout=300, env={**os.environ, **env})


def test_demo_runs_everywhere() -> None:
    r = run("demo")
    assert r.returncode == 0, r.stderr
    assert "parse_interface" in r.stdout and "compiled saxpy_strided for sm_90" in r.stdout
    assert ("no GPU" in r.stdout) or ("max |error|" in r.stdout)


def test_info() -> None:
    r = run("info")
    assert r.returncode == 0, r.stderr
    assert "NVRTC" in r.stdout and "disk cache" in r.stdout


def test_compile_prints_layouts() -> None:
    path = os.path.join(ROOT, "kernels", "ops", "elementwise.cu")
    r = run("compile", path, "--arch", "sm_80", "--instantiate", "axpy<double>", "--name", "axpy<double>", "--json")
    assert r.returncode == 0, r.stderr
    (k,) = json.loads(r.stdout)
    assert k["demangled"] == "void axpy<double>(double, double const*, double const*, double*, long long)"
    assert [p["offset"] for p in k["params"]] == [0, 8, 16, 24, 32]
    assert k["arch"] == "sm_80" and k["image"] == "cubin"


def test_compile_error_exit_code_and_log(tmp_path: "os.PathLike[str]") -> None:
    bad = os.path.join(tmp_path, "bad.cu")
    with open(bad, "w") as f:
        f.write('extern "C" __global__ void k(float* y) {\n  y[0] = nope;\n}\n')
    r = run("compile", bad)
    assert r.returncode == 1
    assert "bad.cu(2)" in r.stderr and "nope" in r.stderr


def test_cache_directory_trust(tmp_path: "os.PathLike[str]") -> None:
    """The disk cache is used only in a directory this user owns and others cannot write;
    `info` says which, and why not."""
    private = os.path.join(tmp_path, "private")
    r = run("info", CAIJIT_CACHE_DIR=private)
    assert r.returncode == 0, r.stderr
    assert f"disk cache: {private} (mode 700, 0 entries" in r.stdout
    assert oct(os.stat(private).st_mode & 0o777) == "0o700"
    shared = os.path.join(tmp_path, "shared")
    os.mkdir(shared)
    os.chmod(shared, 0o777)
    r = run("info", CAIJIT_CACHE_DIR=shared)
    assert f"disk cache: not used: {shared}: its mode 777 lets others write it" in r.stdout
    source = os.path.join(tmp_path, "k.cu")
    with open(source, "w") as f:
        f.write('extern "C" __global__ void k(float* y) { y[0] = 1.f; }\n')
    r = run("compile", source, CAIJIT_CACHE_DIR=shared)
    assert r.returncode == 0, r.stderr
    assert f"warning: not using the disk cache {shared}: its mode 777" in r.stderr  # and compiled anyway
    assert os.listdir(shared) == []
    assert run("info", CAIJIT_CACHE="0").stdout.count("disk cache: disabled") == 1


def test_cache_directory_must_be_absolute() -> None:
    for value in ("", "relative/cache"):
        r = run("info", CAIJIT_CACHE_DIR=value)
        assert r.returncode == 2, r.stdout  # a mistake in what was asked
        assert "CAIJIT_CACHE_DIR must be an absolute path" in r.stderr, r.stderr


# --- mistakes: one line naming the file and the problem, exit status 2 ----------------------


def test_help_is_plain_text_with_an_example_per_command() -> None:
    r = run("--help")
    assert r.returncode == 0, r.stderr
    assert "``" not in r.stdout and ":func:" not in r.stdout
    for cmd in ("demo", "info", "compile", "cache", "bundle build", "bundle info"):
        assert f"python -m caijit {cmd}" in r.stdout, cmd
    r = run("compile", "--help")
    options = r.stdout.split("options:", 1)[1].split("examples:", 1)[0]
    for option in ("--arch", "--name", "--instantiate", "--option", "--include", "--json"):
        assert option in options, option
    assert r.stdout.count("e.g.") >= 7, r.stdout  # an example for FILE and each option
    assert "examples:" in r.stdout and "--instantiate 'axpy<float>'" in r.stdout
    for cmd in ("demo", "info", "cache"):
        assert "example" in run(cmd, "--help").stdout, cmd


def test_a_missing_command_names_the_commands() -> None:
    r = run()
    assert r.returncode == 2
    assert "demo, info, compile, cache" in r.stderr and "required: cmd" not in r.stderr, r.stderr


def test_compile_mistakes_are_one_line_naming_the_file(tmp_path: "os.PathLike[str]") -> None:
    binary = os.path.join(tmp_path, "k.cu")
    with open(binary, "wb") as f:
        f.write(b"\x7fELF\x02\x01\x01\x00\xff\xfe")
    empty = os.path.join(tmp_path, "empty.cu")
    open(empty, "w").close()
    missing = os.path.join(tmp_path, "missing.cu")
    for path, problem in [(missing, "no such file"), (str(tmp_path), "is a directory"), (binary, "not UTF-8"), (empty, "declares no __global__")]:
        r = run("compile", path)
        assert r.returncode == 2, (path, r.stderr)
        assert "Traceback" not in r.stderr
        assert r.stderr.count("\n") == 1 and path in r.stderr and problem in r.stderr, r.stderr


def test_cache_clear_on_an_unusable_directory_names_it() -> None:
    r = run("cache", "clear", CAIJIT_CACHE_DIR="/etc/passwd/x")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "/etc/passwd/x" in r.stderr and r.stderr.count("\n") == 1, r.stderr


def test_compile_lists_templates_and_refuses_unknown_names(tmp_path: "os.PathLike[str]") -> None:
    source = os.path.join(tmp_path, "k.cu")
    with open(source, "w") as f:
        f.write('extern "C" __global__ void plain(float* y) { y[0] = 1.f; }\n')
        f.write("template <typename T, int N>\n__global__ void scale(T a, T* y) { y[0] *= a * N; }\n")
    r = run("compile", source)
    assert r.returncode == 0, r.stderr
    assert "plain: plain" in r.stdout
    assert "scale<T, N>(T, T*): a template" in r.stdout and "--instantiate 'scale<float, 1>'" in r.stdout, r.stdout
    r = run("compile", source, "--name", "scale")
    assert r.returncode == 0 and "plain" not in r.stdout and "scale<T, N>" in r.stdout, r.stdout
    r = run("compile", source, "--instantiate", "scale<float, 2>", "--name", "scale")
    assert r.returncode == 0 and "void scale<float, 2>(float, float*)" in r.stdout and "a template" not in r.stdout, r.stdout
    r = run("compile", source, "--name", "nosuch")
    assert r.returncode == 2
    assert "'nosuch'" in r.stderr and "plain, scale" in r.stderr, r.stderr


def test_json_cache_field_is_one_of_the_sources(tmp_path: "os.PathLike[str]") -> None:
    source = os.path.join(tmp_path, "k.cu")
    with open(source, "w") as f:
        f.write('extern "C" __global__ void k(float* y) { y[0] = 2.f; }\n')
    first = json.loads(run("compile", source, "--json").stdout)[0]["cache"]
    again = json.loads(run("compile", source, "--json").stdout)[0]["cache"]
    assert (first, again) == ("compiled", "disk")


def test_the_test_run_does_not_use_the_users_cache() -> None:
    """conftest.py points CAIJIT_CACHE_DIR at a temporary directory (unless set explicitly)."""
    r = run("cache", "info")
    assert r.returncode == 0, r.stderr
    assert os.path.expanduser("~/.cache/caijit") not in r.stdout, r.stdout
    assert os.environ["CAIJIT_CACHE_DIR"] in r.stdout


def test_file_names_pipes_and_arguments_never_give_a_traceback(tmp_path: "os.PathLike[str]") -> None:
    bad = os.path.join(os.fsencode(tmp_path), b"bad\xff.cu")
    with open(bad, "wb") as f:
        f.write(b'extern "C" __global__ void k(float* y) { y[0] = 1.f; }\n')
    r = run("compile", os.fsdecode(bad))
    assert r.returncode == 2 and "file name is not UTF-8" in r.stderr and "Traceback" not in r.stderr, r.stderr
    source = os.path.join(tmp_path, "many.cu")
    with open(source, "w") as f:
        f.write("".join(f'extern "C" __global__ void k{i}(float* y, int n) {{ y[0] = n; }}\n' for i in range(200)))
    piped = subprocess.run(f"{sys.executable} -m caijit compile {source} | head -1", shell=True, capture_output=True, text=True, timeout=300)
    assert "Traceback" not in piped.stderr and piped.stdout.count("\n") == 1, piped.stderr
    for args in (["--name", ""], ["--arch", "sm_xx"]):
        r = run("compile", source, *args)
        assert r.returncode == 2 and "Traceback" not in r.stderr, (args, r.returncode, r.stderr)


def test_another_libnvrtc_first_on_the_loader_path_is_an_error_not_a_panic(tmp_path: "os.PathLike[str]") -> None:
    """cudarc calls NVRTC through the library it finds by soname; when that is not the one
    caijit loaded (another libnvrtc.so first on LD_LIBRARY_PATH), caijit says so."""
    import ctypes.util

    libm = ctypes.util.find_library("m")
    assert libm is not None
    import shutil

    for d in ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64"):
        if os.path.exists(os.path.join(d, libm)):
            shutil.copy(os.path.join(d, libm), os.path.join(tmp_path, "libnvrtc.so"))
            break
    else:
        import pytest

        pytest.skip("no libm to stand in for another libnvrtc.so")
    r = run("info", LD_LIBRARY_PATH=os.fspath(tmp_path))
    assert "Panic" not in r.stderr + r.stdout and "Traceback" not in r.stderr, r.stderr
    assert "NVRTC" in r.stdout


# The command line and the Python API agree: a name, an architecture, CAIJIT_ARCH and a
# misspelt kernel mean the same in both; --json is JSON for every command that has it,
# errors included.

TEMPLATE = """
template <typename T>
__global__ void axpy(T a, const T* x, T* y, long long n) { long long i = threadIdx.x; if (i < n) y[i] = a * x[i] + y[i]; }
extern "C" __global__ void scale(float* y, float a) { y[threadIdx.x] *= a; }
"""


def _source(tmp_path: "os.PathLike[str]") -> str:
    path = os.path.join(tmp_path, "axpy.cu")
    with open(path, "w") as f:
        f.write(TEMPLATE)
    return path


def _no_gpu() -> bool:
    return gpu_unavailable_reason() is not None


def test_a_template_instance_by_name_is_instantiated(tmp_path: "os.PathLike[str]") -> None:
    """`--name 'axpy<float>'` (the example in --help) compiles that instance, as
    `caijit.kernel(source, "axpy<float>")` does, without --instantiate."""
    r = run("compile", _source(tmp_path), "--name", "axpy<float>", "--arch", "sm_80", "--json")
    assert r.returncode == 0, r.stderr
    (k,) = json.loads(r.stdout)
    assert k["demangled"] == "void axpy<float>(float, float const*, float*, long long)"
    (api,) = caijit.kernel(TEMPLATE, "axpy<float>").compile(arch="sm_80")
    assert [p["offset"] for p in k["params"]] == [p["offset"] for p in api["params"]] == [0, 8, 16, 24]


def test_a_virtual_architecture_is_refused_by_both(tmp_path: "os.PathLike[str]") -> None:
    """compute_90 names PTX for a virtual architecture: refused (an sm_90 CUBIN would be
    something else than was asked for), by the command line and by the API."""
    r = run("compile", _source(tmp_path), "--arch", "compute_90")
    assert r.returncode == 2 and "virtual architecture" in r.stderr and "sm_90" in r.stderr, r.stderr
    with pytest.raises(caijit.ArgumentError, match="virtual architecture"):
        caijit.kernel(TEMPLATE, "scale").compile(arch="compute_90")


def test_caijit_arch_is_read_by_both(tmp_path: "os.PathLike[str]") -> None:
    """Without a GPU, `compile` without --arch compiles for CAIJIT_ARCH, as `k.params`
    does; a CAIJIT_ARCH that is no architecture is an error naming it, in both."""
    if not _no_gpu():
        pytest.skip("with a GPU both compile for the device's architecture")
    source = _source(tmp_path)
    r = run("compile", source, "--name", "scale", "--json", CAIJIT_ARCH="sm_75")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)[0]["arch"] == "sm_75"
    r = run("compile", source, "--name", "scale", CAIJIT_ARCH="bogus")
    assert r.returncode == 2 and "CAIJIT_ARCH" in r.stderr and "bogus" in r.stderr and "Traceback" not in r.stderr, r.stderr
    code = "import caijit; caijit.kernel(open(%r).read(), 'scale').params" % source
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, "CAIJIT_ARCH": "bogus"})
    assert p.returncode != 0 and "CAIJIT_ARCH" in p.stderr and "bogus" in p.stderr, p.stderr


def test_a_misspelt_kernel_lists_the_kernels_in_both(tmp_path: "os.PathLike[str]") -> None:
    """A name the program does not have: both list the kernels it has, and neither shows
    NVRTC's generated name map."""
    r = run("compile", _source(tmp_path), "--name", "scael")
    assert r.returncode == 2 and "no kernel named 'scael'" in r.stderr and "scale" in r.stderr, r.stderr
    with pytest.raises(caijit.ArgumentError) as e:
        caijit.kernel(TEMPLATE, "scael").params
    message = str(e.value)
    assert "scael" in message and "scale" in message and "axpy" in message, message
    assert "__nv_name_map" not in message and "nv_mangled_name" not in message, message
    # A kernel a macro makes is not visibly declared, and is found all the same.
    made = '#define KERNEL(n) extern "C" __global__ void n(float* y) { y[0] = 1; }\nKERNEL(made)\n'
    assert [p["type"] for p in caijit.kernel(made, "made").params] == ["float*"]


def test_info_json() -> None:
    r = run("info", "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert set(data) >= {"caijit", "python", "driver", "nvrtc", "disk_cache"}
    assert ("error" in data["driver"]) or isinstance(data["driver"]["devices"], list)
    assert data["disk_cache"]["state"] in ("usable", "disabled", "refused") or "dir" in data["disk_cache"]


def test_errors_are_json_with_json(tmp_path: "os.PathLike[str]") -> None:
    bad = os.path.join(tmp_path, "bad.cu")
    with open(bad, "w") as f:
        f.write('extern "C" __global__ void k(float* y) {\n  y[0] = nope;\n}\n')
    r = run("compile", bad, "--json")
    assert r.returncode == 1
    error = json.loads(r.stdout)["error"]
    assert error["type"] == "CompileError" and "nope" in error["log"] and "bad.cu(2)" in error["message"] + error["log"]
    r = run("compile", bad, "--name", "nosuch", "--json", "--arch", "compute_90")
    assert r.returncode == 2
    assert json.loads(r.stdout)["error"]["type"] in ("ArgumentError", "UsageError")


# --- one vocabulary: the same option has the same name in every command ------------------


def test_help_lists_every_command_with_an_example_and_the_docstring_names_them() -> None:
    import caijit.__main__ as cli

    p = cli.parser()
    commands = cli._commands(p)
    assert {"demo", "info", "compile", "cache", "bundle", "bundle build", "bundle info"} <= set(commands)
    top = run("--help").stdout
    examples = top.split("examples", 1)[1]
    for cmd in ("demo", "info", "compile", "cache", "bundle"):
        assert f"  python -m caijit {cmd} " in examples, cmd
        assert cmd in (cli.__doc__ or ""), cmd
    for cmd in ("bundle", "bundle build", "bundle info"):
        r = run(*cmd.split(), "--help")
        assert r.returncode == 0 and "example" in r.stdout and f"python -m caijit {cmd}" in r.stdout, (cmd, r.stdout)


def test_instantiate_is_one_option_with_one_alias_in_compile_and_bundle_build() -> None:
    for cmd in (["compile"], ["bundle", "build"]):
        r = run(*cmd, "--help")
        # One option line naming both spellings ("--instantiate EXPR, --instance EXPR"
        # before Python 3.13, "--instantiate, --instance EXPR" from it on).
        assert re.search(r"^  --instantiate( EXPR)?, --instance EXPR", r.stdout, re.M), (cmd, r.stdout)
    r = run("bundle", "--help")
    assert "--instantiate 'axpy<float>'" in r.stdout and "--instance '" not in r.stdout, r.stdout


@pytest.mark.skipif(nvrtc_missing() is not None, reason=str(nvrtc_missing()))
def test_compile_and_bundle_build_take_instantiate_and_instance_alike(tmp_path: "os.PathLike[str]") -> None:
    source = _source(tmp_path)
    for flag in ("--instantiate", "--instance"):
        r = run("compile", source, flag, "axpy<double>", "--name", "axpy<double>", "--arch", "sm_80", "--json")
        assert r.returncode == 0, (flag, r.stderr)
        assert json.loads(r.stdout)[0]["demangled"] == "void axpy<double>(double, double const*, double*, long long)"
        out = os.path.join(tmp_path, f"b{flag}.caijit")
        r = run("bundle", "build", source, flag, "axpy<double>", "--arch", "sm_80", "--no-ptx", "-o", out)
        assert r.returncode == 0, (flag, r.stderr)
        assert "warning" not in r.stderr, r.stderr
        assert "axpy<double>" in run("bundle", "info", out).stdout


@pytest.mark.skipif(nvrtc_missing() is not None, reason=str(nvrtc_missing()))
def test_bundle_build_warns_about_templates_nobody_instantiated(tmp_path: "os.PathLike[str]") -> None:
    """As `compile` lists them: a template is compiled only when instantiated, so a bundle
    of a file whose template nobody instantiated says which one was left out and how to
    instantiate it."""
    source = _source(tmp_path)
    out = os.path.join(tmp_path, "k.caijit")
    r = run("bundle", "build", source, "--arch", "sm_80", "--no-ptx", "-o", out)
    assert r.returncode == 0, r.stderr
    assert f"warning: {source}: axpy<T>(T, const T*, T*, long long): a template, not compiled" in r.stderr, r.stderr
    assert "--instantiate 'axpy<float>'" in r.stderr and "scale" not in r.stderr, r.stderr
    assert run("compile", source).stdout.count("--instantiate 'axpy<float>'") == 1


def test_an_option_of_another_command_is_named_with_its_command(tmp_path: "os.PathLike[str]") -> None:
    source = _source(tmp_path)
    cases = [
        (["compile", source, "-o", "x.caijit"], "-o is an option of bundle build, not of compile"),
        (["compile", source, "--ops"], "--ops is an option of bundle build, not of compile"),
        (["bundle", "build", source, "--arch", "sm_90", "-o", "x.caijit", "--name", "axpy"], "--name is an option of compile, not of bundle build"),
        (["info", "--arch", "sm_90"], "--arch is an option of compile and bundle build, not of info"),
        (["bundle", "info", "x.caijit", "--json"], "--json is an option of info and compile, not of bundle info"),
        (["compile", source, "--instanciate", "axpy<float>"], "did you mean --instantiate?"),
    ]
    for args, hint in cases:
        r = run(*args)
        assert r.returncode == 2 and "Traceback" not in r.stderr, (args, r.stderr)
        last = r.stderr.strip().splitlines()[-1]
        command = " ".join(a for a in args[:2] if not a.startswith(("-", "/")) and "." not in a)
        assert last.startswith(f"python -m caijit {command}: error:") and hint in last, (args, r.stderr)
        assert f"usage: python -m caijit {command}" in r.stderr, (args, r.stderr)


def test_a_missing_action_names_the_actions() -> None:
    r = run("bundle")
    assert r.returncode == 2 and "missing an action: build or info" in r.stderr, r.stderr
    r = run("cache")
    assert r.returncode == 2 and "missing an action: info or clear" in r.stderr, r.stderr


def test_import_caijit_jax_without_jax_says_what_to_install(tmp_path: "os.PathLike[str]") -> None:
    fake = os.path.join(tmp_path, "jax")
    os.mkdir(fake)
    with open(os.path.join(fake, "__init__.py"), "w") as f:
        f.write("raise ModuleNotFoundError(\"No module named 'jax'\", name='jax')\n")
    # (In front of the PYTHONPATH caijit may be installed on.)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (os.fspath(tmp_path), os.environ.get("PYTHONPATH")) if p)}
    r = subprocess.run([sys.executable, "-c", "import caijit.jax"], capture_output=True, text=True, env=env, timeout=120)
    last = r.stderr.strip().splitlines()[-1]
    assert r.returncode == 1 and last.startswith("ImportError: caijit.jax needs JAX >= 0.10.2"), r.stderr
    assert ("pip install" in last) if sys.version_info >= (3, 11) else ("Python >= 3.11" in last), last
