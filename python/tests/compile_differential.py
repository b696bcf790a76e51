"""A differential test of caijit's compile caches against NVRTC reading the files from disk.

Each case is a program with a random include graph (quoted and angle includes, relative
paths, one header name in several include directories, guards and `#pragma once`,
`__has_include`, `#include MACRO`, headers chosen by `#if`, pre-includes) and text that a
naive include scanner misreads (raw strings, comments, line splices, digit separators),
compiled with options spelled in every form NVRTC accepts. Every header defines a type and
a constant the kernels' parameters and bodies use, so which file NVRTC read shows in the
mangled names, the parameter types and the PTX.

A run of N cases (seeded; case i is made from `seed` and `i` alone):

1. writes version 1 of every case; a long-lived worker process compiles them all through
   caijit (populating its disk cache) while this process compiles them with NVRTC itself
   (ctypes, the library caijit loads, the files read from disk: the ground truth);
2. edits one random header of each case (a typedef or macro that decides a parameter type,
   and a constant the PTX shows);
3. the first worker compiles version 2 of every case (its memory cache holds version 1)
   while this process compiles version 2 with NVRTC; then a fresh worker compiles version 2
   (the disk cache holds version 1, and what the first worker stored for version 2).

For every case and each of the three caijit compilations: the kernels' lowered names,
parameter types and PTX bodies must equal NVRTC's, and caijit must fail exactly when NVRTC
fails. A mismatch whose result equals NVRTC's for version 1 is a stale binary.

Command line (the soak, or one case to study):
    python python/tests/compile_differential.py --cases 20000 [--seed S]
    python python/tests/compile_differential.py --seed S --case I --keep DIR
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Optional

ARCH = "sm_90"

# Types a header may choose for a parameter: spelling, Itanium mangling code, PTX `.param` type.
TYPES = [
    ("int", "i", ".u32"),
    ("unsigned", "j", ".u32"),
    ("unsigned int", "j", ".u32"),
    ("float", "f", ".f32"),
    ("double", "d", ".f64"),
    ("long long", "x", ".u64"),
    ("unsigned long long", "y", ".u64"),
    ("short", "s", ".u16"),
    ("unsigned short", "t", ".u16"),
    ("char", "c", ".u8"),
]
#: caijit's spelling of a parameter type -> mangling code (anything else is a mismatch).
#: caijit names a scalar by its dtype: `char` (int8 on CUDA) is "signed char"; the lowered
#: name, compared too, still tells `char` from `signed char`.
CODE_OF = {
    "signed char": "c", "int": "i", "unsigned": "j", "unsigned int": "j", "float": "f", "double": "d", "long long": "x",
    "long long int": "x", "unsigned long long": "y", "unsigned long long int": "y", "short": "s",
    "short int": "s", "unsigned short": "t", "unsigned short int": "t", "char": "c", "int*": "Pi", "int *": "Pi",
}  # fmt: skip
MANGLED = {spelling: code for spelling, code, _ in TYPES}
PTX_OF_CODE = {code: ptx for _, code, ptx in TYPES} | {"Pi": ".u64"}
FALLBACK_TYPE = "char"  # a slot no header defined
DIRS = ["src", "inc1", "inc2", "inc3", "inc1/sub"]


# --------------------------------------------------------------------------- generation


@dataclass
class Header:
    """One header file of a case; `render` writes it."""

    path: str  # relative to the case directory
    slot: Optional[int]  # the slot it defines (None: a configuration or pre-include header)
    guard: str  # "guard", "once", "both", "none"
    guard_name: str
    type_form: str  # "typedef", "using", "define"
    value_form: str  # "define", "enum", "constexpr"
    type: str = "int"
    value: int = 0
    selectors: dict[str, int] = field(default_factory=dict)
    noise: list[str] = field(default_factory=list)
    includes: list[str] = field(default_factory=list)
    defs_first: bool = True

    def render(self) -> str:
        out: list[str] = []
        if self.guard in ("once", "both"):
            out.append("#pragma once")
        if self.guard in ("guard", "both"):
            out += [f"#ifndef {self.guard_name}", f"#define {self.guard_name}"]
        out += self.noise
        defs: list[str] = []
        for k, v in self.selectors.items():
            defs += [f"#undef {k}", f"#define {k} {v}"]
        if self.slot is not None:
            s = f"S{self.slot}"
            defs += [f"#ifndef {s}_DONE", f"#define {s}_DONE"]
            defs.append(
                {"typedef": f"typedef {self.type} {s}_T;", "using": f"using {s}_T = {self.type};", "define": f"#define {s}_T {self.type}"}[self.type_form]
            )
            defs.append(
                {"define": f"#define {s}_V {self.value}", "enum": f"enum {{ {s}_V = {self.value} }};", "constexpr": f"constexpr int {s}_V = {self.value};"}[
                    self.value_form
                ]
            )
            defs.append("#endif")
        out += (defs + self.includes) if self.defs_first else (self.includes + defs)
        if self.guard in ("guard", "both"):
            out.append(f"#endif // {self.guard_name}")
        return "\n".join(out) + "\n"


@dataclass
class Case:
    seed: int
    index: int
    name: str  # the case directory, relative to the run's root (the compilers' cwd)
    root: str
    headers: dict[str, Header]
    source: str
    file: str  # the kernel source as given to both compilers (relative to root, or absolute)
    options: list[str]
    include_dirs: list[str]
    defines: list[tuple[str, Optional[str]]]
    features: set[str]
    edit: tuple[str, Header]  # the header edited and its version 2
    edit_keeps_mtime: bool

    @property
    def kernel(self) -> str:
        return f"k{self.name}"

    @property
    def extern_kernel(self) -> str:
        return f"e{self.name}"

    def write(self, version: int) -> None:
        base = os.path.join(self.root, self.name)
        for d in DIRS + ["pch"]:
            os.makedirs(os.path.join(base, d), exist_ok=True)
        if version == 1:
            with open(os.path.join(base, "src", "k.cu"), "w") as f:
                f.write(self.source)
            for path, h in self.headers.items():
                with open(os.path.join(base, path), "w") as f:
                    f.write(h.render())
        else:
            path, h = self.edit
            full = os.path.join(base, path)
            st = os.stat(full)
            with open(full, "w") as f:
                f.write(h.render())
            if self.edit_keeps_mtime:
                os.utime(full, ns=(st.st_atime_ns, st.st_mtime_ns))

    def job(self) -> dict[str, Any]:
        return {"id": self.index, "file": self.file, "options": self.options, "include_dirs": self.include_dirs, "defines": self.defines,
                "kernels": [self.kernel, self.extern_kernel]}  # fmt: skip

    def nvrtc_options(self) -> list[str]:
        """What caijit documents it gives NVRTC, as the user wrote it: the file's directory,
        then the include directories and defines, then the options; C++17 unless chosen."""
        opts = [f"-arch=compute_{ARCH[3:]}"]
        if not any(o.startswith("-std") or o.startswith("--std") for o in self.options):
            opts.append("-std=c++17")
        opts.append("-I" + (os.path.dirname(self.file) or "."))
        opts += ["-I" + d for d in self.include_dirs]
        opts += [f"-D{k}" if v is None else f"-D{k}={v}" for k, v in self.defines]
        return opts + [o for o in self.options if o != "-pch" and not o.startswith("--pch-dir=")]

    def describe(self, version: int) -> str:
        """Every file and option of the case (version 1, and the edited header's version 2)."""
        lines = [f"case {self.index} of seed {self.seed}: directory {os.path.join(self.root, self.name)} (cwd {self.root})",
                 f"  file: {self.file}", f"  options: {self.options}", f"  include_dirs: {self.include_dirs}",
                 f"  defines: {self.defines}", f"  features: {sorted(self.features)}",
                 f"  edited: {self.edit[0]}" + (" (mtime kept)" if self.edit_keeps_mtime else ""), "--- src/k.cu", self.source.rstrip()]  # fmt: skip
        for path, h in sorted(self.headers.items()):
            lines += [f"--- {path}" + (" (version 1)" if path == self.edit[0] else ""), h.render().rstrip()]
        lines += [f"--- {self.edit[0]} (version 2)", self.edit[1].render().rstrip()]
        return "\n".join(lines)


class _Gen:
    """Builds one case from its own random stream."""

    def __init__(self, seed: int, index: int, root: str) -> None:
        self.rng = random.Random(f"{seed}:{index}")
        self.seed, self.index, self.root = seed, index, root
        self.name = f"c{index:05d}"
        self.features: set[str] = set()
        self.counter = 0
        self.search: list[str] = []
        self.slot_forms: dict[int, set[str]] = {}
        self.pre_form = ""

    def tag(self, slot: int, feature: str) -> None:
        """A feature of the case, and of how slot `slot` is included."""
        self.features.add(feature)
        self.slot_forms.setdefault(slot, set()).add(feature)

    def own_slot(self, h: Header, nslots: int) -> None:
        """Make configuration or pre-include header `h` define a slot (most of the time): it
        is read first, so its definitions win and an edit of it shows."""
        if self.rng.random() < 0.6:
            h.slot = self.rng.randrange(nslots)
            h.type_form = self.rng.choice(["typedef", "using", "define"])
            h.value_form = self.rng.choice(["define", "enum", "constexpr"])
            h.type, h.value = self.type_value()
            self.features.add("slot_in_config")

    def uniq(self) -> int:
        self.counter += 1
        return self.counter

    def spell_dir(self, d: str) -> str:
        """A directory of the case as an option names it: relative to the cwd, absolute,
        with `./` or a trailing slash."""
        rel = f"{self.name}/{d}"
        form = self.rng.choice(["rel", "rel", "abs", "dot", "slash"])
        self.features.add(f"path:{form}")
        return {"rel": rel, "abs": os.path.join(self.root, rel), "dot": "./" + rel, "slash": rel + "/"}[form]

    def type_value(self, avoid: Optional[tuple[str, int]] = None) -> tuple[str, int]:
        """A type and a constant for a slot; with `avoid`, a different type and constant."""
        while True:
            t = self.rng.choice(TYPES)[0]
            v = self.rng.randrange(1000, 99999)
            if avoid is None or (MANGLED[t] != MANGLED[avoid[0]] and v != avoid[1]):
                return t, v

    def noise(self) -> list[str]:
        """Text a naive include scanner misreads; NVRTC sees no include in it."""
        out: list[str] = []
        for _ in range(self.rng.randrange(0, 3)):
            kind = self.rng.choice(["raw", "digits", "comment", "splice_comment", "dead", "char_quote", "string_escape"])
            self.features.add(f"noise:{kind}")
            n = self.uniq()
            if kind == "raw":
                out += [f'[[maybe_unused]] static constexpr const char nz_raw_{n}_[] = R"nz(',
                        '#include "zz_missing.h"', "/* not a comment \" ' ", ')nz";']  # fmt: skip
            elif kind == "digits":
                out.append(f"enum : long long {{ nz_dig_{n}_ = 1'000 }};")
            elif kind == "comment":
                out += ["/* a comment that names", '#include "zz_missing.h"', "*/"]
            elif kind == "splice_comment":
                out += ["// a line comment continued \\", '#include "zz_missing.h"']
            elif kind == "dead":
                out += ["#if 0", '#include "zz_missing.h"', "#endif"]
            elif kind == "char_quote":
                out.append(f"[[maybe_unused]] static constexpr char nz_chr_{n}_ = '\"';")
            else:
                out.append(f'[[maybe_unused]] static constexpr const char nz_str_{n}_[] = "\\" /* #include <zz.h> ";')
        # Each noise name is made unique per file; a file included twice needs a guard.
        return out

    def include(self, from_dir: str, slot: int, variants: list[str]) -> list[str]:
        """Directive(s) including slot `slot` from a file in `from_dir`."""
        name = f"h{slot}.h"
        r = self.rng
        form = r.choice(["quoted", "quoted", "angle", "angle", "relpath", "subdir", "macro", "stringize", "has_include", "sel_if", "cplusplus_if", "splice", "comment_directive"])

        where = {os.path.dirname(v) for v in variants}
        # Forms that find a file (a few that may not are kept: both compilers must fail).
        feasible = ["relpath"]
        if where & set(self.search) or r.random() < 0.05:
            feasible += ["angle", "quoted"]
        elif from_dir in where:
            feasible.append("quoted")
        if ("inc1/sub" in where and "inc1" in self.search) or r.random() < 0.05:
            feasible.append("subdir")

        def simple() -> tuple[str, str]:
            """(the operand of #include, its feature)."""
            f = r.choice(feasible)
            if f == "relpath":
                target = r.choice(variants)
                rel = os.path.relpath(os.path.dirname(target) or ".", from_dir or ".")
                return f'"{os.path.join(rel, name) if rel != "." else "./" + name}"', "relpath"
            if f == "subdir":
                return f"<sub/{name}>", "subdir"
            return (f'"{name}"', "quoted") if f == "quoted" else (f"<{name}>", "angle")

        if form in ("quoted", "angle", "relpath", "subdir"):
            form = form if form in feasible else "relpath"
            op, f = simple()
            self.tag(slot, f"inc:{f}")
            return [f"#include {op}"]
        self.tag(slot, f"inc:{form}")
        op, f = simple()
        self.tag(slot, f"inc:{f}")
        n = self.uniq()
        if form == "macro":
            return [f"#define INC_{slot}_{n}_ {op}", f"#include INC_{slot}_{n}_"]
        if form == "stringize":
            if op == f"<{name}>":
                return [f"#define ANG_{n}_(x) <x.h>", f"#include ANG_{n}_(h{slot})"]
            if op.startswith("<"):
                return [f"#define HDR_{n}_ {op}", f"#include HDR_{n}_"]
            return [f"#define STR_{n}_(x) #x", f"#define XSTR_{n}_(x) STR_{n}_(x)", f"#include XSTR_{n}_({op[1:-1]})"]
        if form == "has_include":
            op2, f2 = simple()
            self.tag(slot, f"inc:{f2}")
            return [f"#if __has_include({op})", f"#include {op}", f"#elif __has_include({op2})", f"#include {op2}", "#endif"]
        if form == "sel_if":
            op2, f2 = simple()
            self.tag(slot, f"inc:{f2}")
            sel = f"SEL{r.randrange(3)}"
            return [f"#if {sel} == 1", f"#include {op}", f"#elif {sel} == 2", f"#include {op2}", "#endif"]
        if form == "cplusplus_if":
            op2, f2 = simple()
            self.tag(slot, f"inc:{f2}")
            return ["#if __cplusplus >= 202002L", f"#include {op}", "#else", f"#include {op2}", "#endif"]
        if form == "splice":
            return r.choice([["#inc\\", f"lude {op}"], ["#include \\", op], ["# \\", f"  include {op}"]])
        return r.choice([[f"/* c */ #include {op}"], [f"# /* c */ include {op}"], [f"  #  include {op} // trailing"]])

    def case(self) -> Case:
        r = self.rng
        nslots = r.randrange(2, 6)
        options: list[str] = []
        # Include directories: the case's own, in a random order, spelled every way.
        inc = r.sample(["inc1", "inc2", "inc3"], r.randrange(1, 4))
        api_dirs: list[str] = []
        for d in inc:
            spelled = self.spell_dir(d)
            form = r.choice(["api", "-I dir", "-Idir", "-I=dir", "--include-path=dir", "--include-path dir"])
            self.features.add(f"I:{form}")
            if form == "api":
                api_dirs.append(spelled)
            elif form == "-I dir":
                options += ["-I", spelled]
            elif form == "-Idir":
                options.append("-I" + spelled)
            elif form == "-I=dir":
                options.append("-I=" + spelled)
            elif form == "--include-path=dir":
                options.append("--include-path=" + spelled)
            else:
                options += ["--include-path", spelled]
        self.search = ["src"] + inc  # the file's directory is an include directory
        headers: dict[str, Header] = {}
        variants: dict[int, list[str]] = {}
        for s in range(nslots):
            dirs = r.sample(DIRS, r.choice([1, 2, 2, 3]))
            if len(dirs) > 1:
                self.features.add("same_name_several_dirs")
            shared_guard = r.random() < 0.5
            variants[s] = [f"{d}/h{s}.h" for d in dirs]
            for d in dirs:
                guard = r.choice(["guard", "guard", "once", "both", "none"])
                gname = f"H{s}_GUARD" if shared_guard else f"H{s}_{d.replace('/', '_').upper()}_GUARD"
                if guard in ("guard", "both"):
                    self.features.add("guard_shared" if shared_guard else "guard")
                self.features.add(f"guard:{guard}")
                t, v = self.type_value()
                h = Header(f"{d}/h{s}.h", s, guard, gname, r.choice(["typedef", "using", "define"]), r.choice(["define", "enum", "constexpr"]), t, v)
                h.defs_first = r.random() < 0.5
                headers[h.path] = h
        # Edges: a file of slot s may include higher slots (no cycles).
        for h in headers.values():
            assert h.slot is not None
            if h.guard != "none":
                h.noise = self.noise()
            for to in range(h.slot + 1, nslots):
                if r.random() < 0.4:
                    h.includes += self.include(os.path.dirname(h.path), to, variants[to])
        # Selectors: in a configuration header, a pre-include, an option or an API define.
        selectors = {f"SEL{i}": r.randrange(1, 3) for i in range(3)}
        defines: list[tuple[str, Optional[str]]] = []
        cfg: Optional[Header] = None
        pre: Optional[Header] = None
        where = r.choice(["cfg", "pre", "option", "api", "none"])
        self.features.add(f"selectors:{where}")
        if where == "cfg" or r.random() < 0.3:
            cfg = Header(f"{r.choice(['src', 'inc2'])}/cfg.h", None, r.choice(["guard", "once", "none"]), "CFG_GUARD", "typedef", "define")
            cfg.selectors = dict(selectors) if where == "cfg" else {}
            self.own_slot(cfg, nslots)
            headers[cfg.path] = cfg
        if where == "pre" or r.random() < 0.4:
            pre = Header(r.choice(["pre.h", "inc3/pre.h"]), None, r.choice(["guard", "once", "none"]), "PRE_GUARD", "typedef", "define")
            pre.selectors = dict(selectors) if where == "pre" else {}
            self.own_slot(pre, nslots)
            if r.random() < 0.5:
                s = r.randrange(nslots)
                pre.includes = self.include(os.path.dirname(pre.path), s, variants[s])
            headers[pre.path] = pre
        if pre is not None:
            form = r.choice(["-include f", "-include=f", "--pre-include=f", "--pre-include f"])
            self.features.add(f"pre:{form}")
            self.pre_form = form
            spellings = ["rel", "abs", "dot"] + (["name"] if pre.path.startswith("inc3/") and "inc3" in inc else [])
            spelling = r.choice(spellings)
            self.features.add(f"pre_path:{spelling}")
            ppath = {"rel": f"{self.name}/{pre.path}", "abs": os.path.join(self.root, self.name, pre.path), "dot": f"./{self.name}/{pre.path}",
                     "name": os.path.basename(pre.path)}[spelling]  # fmt: skip
            options += {"-include f": ["-include", ppath], "-include=f": ["-include=" + ppath], "--pre-include=f": ["--pre-include=" + ppath],
                        "--pre-include f": ["--pre-include", ppath]}[form]  # fmt: skip
        if where == "option":
            for k, v in selectors.items():
                form = r.choice(["-DK=V", "-D K=V", "--define-macro=K=V", "--define-macro K=V"])
                self.features.add(f"D:{form}")
                options += {"-DK=V": [f"-D{k}={v}"], "-D K=V": ["-D", f"{k}={v}"], "--define-macro=K=V": [f"--define-macro={k}={v}"],
                            "--define-macro K=V": ["--define-macro", f"{k}={v}"]}[form]  # fmt: skip
        elif where == "api":
            defines = [(k, str(v)) for k, v in selectors.items()]
        std = r.choice([None, "-std=c++17", "--std=c++17", "-std=c++20", "--std=c++20"])
        self.features.add(f"std:{std}")
        if std:
            options.append(std)
        if r.random() < 0.6:
            m = r.choice(["-minimal", "--minimal"])
            options.append(m)
            self.features.add("minimal")
        if r.random() < 0.03:
            # NVRTC's automatic precompiled headers: an input no key covers (the truth
            # compiles without them: they must not change what the program means).
            options += ["-pch", f"--pch-dir={self.name}/pch"]
            self.features.add("pch")
        if r.random() < 0.1:
            options.append("-no-source-include")
            self.features.add("no_source_include")
        # The kernel source.
        src: list[str] = self.noise()
        if cfg is not None:
            if cfg.path.startswith("src/"):
                src.append('#include "cfg.h"')
            else:
                src.append(r.choice(["#include <cfg.h>", '#include "cfg.h"']) if "inc2" in inc else '#include "../inc2/cfg.h"')
        for s in range(nslots):
            if s == 0 or r.random() < 0.5:
                src += self.include("src", s, variants[s])
        src += self.noise()
        used = list(range(nslots))
        for s in used:
            src += [f"#ifndef S{s}_DONE", f"typedef {FALLBACK_TYPE} S{s}_T;", f"#define S{s}_V (-{s + 1})", "#endif"]
        params = ", ".join(f"S{s}_T a{s}" for s in used)
        body = " ".join(f"out[{i}] = S{s}_V + (int)sizeof(a{s});" for i, s in enumerate(used))
        src.append(f"__global__ void k{self.name}({params}, int* out) {{ {body} }}")
        if r.random() < 0.5:
            self.features.add("extern_c")
            s = r.randrange(nslots)
            src.append(f'extern "C" __global__ void e{self.name}(S{s}_T a, int* out) {{ out[0] = S{s}_V * 3 + (int)a; }}')
        source = "\n".join(src) + "\n"
        file = f"{self.name}/src/k.cu" if r.random() < 0.8 else os.path.join(self.root, self.name, "src/k.cu")
        # The edit: a random header; a slot's type and constant, or a selector.
        path = pre.path if pre is not None and r.random() < 0.25 else r.choice(sorted(headers))
        old = headers[path]
        new = Header(**{**old.__dict__, "selectors": dict(old.selectors), "noise": list(old.noise), "includes": list(old.includes)})
        if old.slot is not None:
            new.type, new.value = self.type_value((old.type, old.value))
            self.features.add("edit:slot")
            # How the edited header's name is included, and how it is protected.
            if old is not pre and old is not cfg:
                self.features |= {"edited_" + f for f in self.slot_forms.get(old.slot, set())}
            self.features.add(f"edited_guard:{old.guard}")
        elif old.selectors:
            k = r.choice(sorted(old.selectors))
            new.selectors[k] = 3 - old.selectors[k]
            self.features.add("edit:selector")
        else:
            new.selectors = {f"SEL{r.randrange(3)}": r.randrange(1, 3)}
            self.features.add("edit:new_define")
        if old is pre:
            self.features.add(f"edited_pre:{self.pre_form}")
        self.features.add(f"edit_in:{'pre' if old is pre else 'cfg' if old is cfg else old.path.split('/')[0]}")
        keep = r.random() < 0.2
        if keep:
            self.features.add("edit_keeps_mtime")
        return Case(self.seed, self.index, self.name, self.root, headers, source, file, options, api_dirs, defines, self.features, (path, new), keep)


def generate(seed: int, index: int, root: str) -> Case:
    """Case `index` of `seed`, to be written under `root` (the compilers' working directory)."""
    return _Gen(seed, index, root).case()


# --------------------------------------------------------------------------- results

_ENTRY = re.compile(r"\.entry\s+([A-Za-z_$][\w$]*)\s*\(([^)]*)\)")


def ptx_entries(ptx: str) -> dict[str, tuple[list[str], str]]:
    """`{entry: ([.param types], body)}` of a PTX text; the body without comments or
    spacing differences."""
    out: dict[str, tuple[list[str], str]] = {}
    for m in _ENTRY.finditer(ptx):
        params = [p.split()[1] for p in m.group(2).split(",") if p.strip()]
        start = ptx.find("{", m.end())
        if start < 0:  # declarations only (a bundle's): no body
            out[m.group(1)] = (params, "")
            continue
        depth, i = 0, start
        while i < len(ptx):
            depth += {"{": 1, "}": -1}.get(ptx[i], 0)
            if depth == 0:
                break
            i += 1
        body = re.sub(r"//[^\n]*", "", ptx[start : i + 1])
        out[m.group(1)] = (params, " ".join(body.split()))
    return out


def mangled_codes(symbol: str, name: str) -> Optional[list[str]]:
    """The parameter codes of `_Z<len><name><codes>` (our vocabulary: builtins and `Pi`)."""
    prefix = f"_Z{len(name)}{name}"
    if not symbol.startswith(prefix):
        return None
    rest, codes = symbol[len(prefix) :], []
    while rest:
        n = 2 if rest[0] in "PK" else 1
        codes.append(rest[:n])
        rest = rest[n:]
    return codes


def summarize(kernels: list[str], symbols: dict[str, tuple[str, list[str]]], ptx: str) -> dict[str, Any]:
    """The comparable view of a compilation: per kernel, its symbol, parameter codes (the
    mangling's, or for `extern "C"` the PTX `.param` types) and PTX body.
    `symbols`: kernel name -> (lowered name, parameter codes) as the compiler reported."""
    entries = ptx_entries(ptx)
    out: dict[str, Any] = {}
    for k in kernels:
        if k not in symbols:
            continue
        sym, codes = symbols[k]
        params, body = entries.get(sym, (None, None))
        out[k] = {"symbol": sym, "params": codes, "ptx_params": params, "body": body}
    return out


# --------------------------------------------------------------------------- NVRTC (truth)


class Nvrtc:
    """NVRTC through ctypes: the library caijit loads, headers read from the file system."""

    def __init__(self) -> None:
        from caijit import _native

        path = _native.nvrtc_info()[0]
        for b in sorted(glob.glob(os.path.join(os.path.dirname(path), "libnvrtc-builtins.so*"))):
            if ".alt." not in b:
                ctypes.CDLL(b, mode=ctypes.RTLD_GLOBAL)
                break
        self.lib = ctypes.CDLL(path)

    def compile(self, case: Case) -> dict[str, Any]:
        """`{"ok": bool, "log": str, "kernels": summary}` of the case as on disk now (cwd: its root)."""
        L, c = self.lib, ctypes
        with open(os.path.join(case.root, case.file)) as f:
            src = f.read()
        prog = c.c_void_p()
        L.nvrtcCreateProgram(c.byref(prog), src.encode(), case.file.encode(), 0, None, None)
        try:
            L.nvrtcAddNameExpression(prog, case.kernel.encode())
            opts = [o.encode() for o in case.nvrtc_options()]
            r = L.nvrtcCompileProgram(prog, len(opts), (c.c_char_p * len(opts))(*opts))
            n = c.c_size_t()
            L.nvrtcGetProgramLogSize(prog, c.byref(n))
            b = c.create_string_buffer(n.value)
            L.nvrtcGetProgramLog(prog, b)
            log = b.value.decode(errors="replace")
            if r != 0:
                return {"ok": False, "log": log.strip()[-600:], "kernels": {}}
            L.nvrtcGetPTXSize(prog, c.byref(n))
            b = c.create_string_buffer(n.value)
            L.nvrtcGetPTX(prog, b)
            ptx = b.value.decode()
            lowered = c.c_char_p()
            symbols: dict[str, tuple[str, list[str]]] = {}
            if L.nvrtcGetLoweredName(prog, case.kernel.encode(), c.byref(lowered)) == 0 and lowered.value:
                sym = lowered.value.decode()
                symbols[case.kernel] = (sym, mangled_codes(sym, case.kernel) or ["?" + sym])
            entries = ptx_entries(ptx)
            if case.extern_kernel in entries:
                symbols[case.extern_kernel] = (case.extern_kernel, entries[case.extern_kernel][0])
            return {"ok": True, "log": "", "kernels": summarize([case.kernel, case.extern_kernel], symbols, ptx)}
        finally:
            L.nvrtcDestroyProgram(c.byref(prog))


# --------------------------------------------------------------------------- caijit (worker)


def _worker() -> None:
    """Compile jobs read from stdin (one JSON list per line) through caijit in this process;
    one JSON result per job on stdout."""
    import caijit
    from caijit import _native

    out = sys.stdout
    for line in sys.stdin:
        for job in json.loads(line):
            res: dict[str, Any] = {"id": job["id"]}
            try:
                with open(job["file"]) as f:
                    src = f.read()
                ptx: list[str] = []
                before = _native.stats()["disk_cache_untrusted_keys"]
                infos = _native.compile_program(src, ARCH, job["file"], [], job["options"], job["include_dirs"], [tuple(d) for d in job["defines"]], [], ptx)
                k, e = job["kernels"]
                symbols: dict[str, tuple[str, list[str]]] = {}
                cache = set()
                for i in infos:
                    types = [p["type"] for p in i["params"]]
                    cache.add(i["cache"])
                    if i["name"] == k:
                        symbols[k] = (i["lowered_name"], [CODE_OF.get(t, "?" + t) for t in types])
                    elif i["name"] == e:
                        symbols[e] = (i["lowered_name"], [PTX_OF_CODE.get(CODE_OF.get(t, ""), "?" + t) for t in types])
                # Compiled from the file system and kept off the disk (caijit could not
                # name every header): its memory-cache key may miss a header.
                # (A build whose kernel infos say it themselves is asked directly.)
                if infos and "untrusted" in infos[0]:
                    res["untrusted"] = any(i["untrusted"] is not None for i in infos)
                else:
                    res["untrusted"] = _native.stats()["disk_cache_untrusted_keys"] > before
                res.update(ok=True, log="", kernels=summarize([k, e], symbols, ptx[0] if ptx else ""), cache=sorted(cache),
                           types={i["name"]: [p["type"] for p in i["params"]] for i in infos})  # fmt: skip
            except caijit.CaijitError as ex:
                res.update(ok=False, log=f"{type(ex).__name__}: {ex}"[-600:], kernels={}, cache=[])
            except Exception as ex:  # anything else is a defect of caijit's: reported as such
                res.update(ok=False, log=f"UNEXPECTED {type(ex).__name__}: {ex}"[-600:], kernels={}, cache=[])
            out.write(json.dumps(res) + "\n")
            out.flush()
        out.write('{"done": true}\n')
        out.flush()


class Worker:
    """A caijit process (cwd: the run's root, its own disk cache) answering batches of jobs."""

    def __init__(self, root: str, cache_dir: str, **extra: str) -> None:
        env = {k: v for k, v in os.environ.items() if k not in ("CAIJIT_CACHE", "CAIJIT_RECORD", "CAIJIT_BUNDLES")}
        env["CAIJIT_CACHE_DIR"] = cache_dir
        env.update(extra)
        self.p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker"], cwd=root, env=env, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
        self.results: dict[int, dict[str, Any]] = {}
        self.err: list[str] = []
        threading.Thread(target=lambda: self.err.extend(self.p.stderr or []), daemon=True).start()

    def start(self, jobs: list[dict[str, Any]]) -> threading.Thread:
        """Send a batch; the returned thread collects its results into `self.results`."""
        assert self.p.stdin and self.p.stdout
        self.results = {}
        self.p.stdin.write(json.dumps(jobs) + "\n")
        self.p.stdin.flush()

        def read() -> None:
            assert self.p.stdout
            for line in self.p.stdout:
                d = json.loads(line)
                if d.get("done"):
                    return
                self.results[d["id"]] = d

        t = threading.Thread(target=read, daemon=True)
        t.start()
        return t

    def finish(self, t: threading.Thread, jobs: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
        t.join()
        for j in jobs:  # a worker that died answers the rest with why
            self.results.setdefault(j["id"], {"id": j["id"], "ok": False, "kernels": {}, "cache": [],
                                              "log": "CRASHED: the caijit worker died: " + "".join(self.err)[-800:]})  # fmt: skip
        return self.results

    def close(self) -> None:
        if self.p.stdin:
            self.p.stdin.close()
        try:
            self.p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.p.kill()


# --------------------------------------------------------------------------- the run


@dataclass
class Failure:
    case: Case
    phase: str  # "v1", "v2-fresh-process", "v2-same-process"
    kind: str  # "stale", "wrong", "caijit-fails", "caijit-succeeds"
    caijit: dict[str, Any]
    nvrtc: dict[str, Any]
    nvrtc_v1: dict[str, Any]

    def describe(self) -> str:
        def show(d: dict[str, Any]) -> str:
            if not d["ok"]:
                return "FAILED: " + str(d["log"]).replace("\n", "\n    ")
            rows = [f"{k}: symbol {v['symbol']} params {v['params']} ptx params {v.get('ptx_params')}\n      body {v.get('body')}" for k, v in d["kernels"].items()]
            extra = f" (cache: {d.get('cache')}; untrusted key: {d.get('untrusted')}; types {d.get('types')})" if "cache" in d else ""
            return ("\n    ".join(rows) or "no kernels") + extra

        return (
            f"{self.kind.upper()} at {self.phase}: seed {self.case.seed} case {self.case.index}\n"
            f"  caijit:          {show(self.caijit)}\n  NVRTC (disk):    {show(self.nvrtc)}\n"
            f"  NVRTC version 1: {show(self.nvrtc_v1)}\n{self.case.describe(2)}"
        )


@dataclass
class Report:
    seed: int
    cases: list[Case]
    failures: list[Failure]
    both_failed: int
    effective_edits: int
    seconds: float
    #: (bundle runs) results served from the bundle without NVRTC.
    served: int = 0

    def failed_cases(self) -> set[int]:
        return {f.case.index for f in self.failures}

    def summary(self) -> str:
        n = len(self.cases)
        kinds = Counter((f.phase, f.kind) for f in self.failures)
        lines = [f"compile differential test: seed {self.seed}, {n} cases in {self.seconds:.0f} s; "
                 f"{self.effective_edits} edits changed NVRTC's result, {self.both_failed} compilations failed in both; "
                 f"{len(self.failed_cases())} cases mismatched"]  # fmt: skip
        for (phase, kind), c in sorted(kinds.items()):
            lines.append(f"  {phase:18} {kind:16} {c}")
        if self.failures:
            lines.append(self.feature_table())
        return "\n".join(lines)

    def feature_table(self) -> str:
        """How often each generator feature appears in failing cases vs all cases."""
        failed = self.failed_cases()
        every = Counter(f for c in self.cases for f in c.features)
        bad = Counter(f for c in self.cases if c.index in failed for f in c.features)
        base = len(failed) / max(1, len(self.cases))
        rows = sorted(every, key=lambda f: -(bad[f] / every[f]))
        out = [f"  feature (failure rate {base:.1%} overall): cases failing / cases with it"]
        out += [f"    {f:34} {bad[f]:6} / {every[f]:<6} {bad[f] / every[f]:6.1%}" for f in rows]
        return "\n".join(out)


def _compare(case: Case, phase: str, got: dict[str, Any], want: dict[str, Any], want_v1: dict[str, Any]) -> Optional[Failure]:
    if got["ok"] and want["ok"]:
        if got["kernels"] == want["kernels"]:
            return None
        stale = want_v1["ok"] and got["kernels"] == want_v1["kernels"]
        return Failure(case, phase, "stale" if stale else "wrong", got, want, want_v1)
    if got["ok"] == want["ok"]:
        return None
    return Failure(case, phase, "caijit-succeeds" if got["ok"] else "caijit-fails", got, want, want_v1)


def run(indices: list[int], seed: int, root: str, progress: bool = False) -> Report:
    """The differential test over cases `indices` of `seed`, written under `root`."""
    t0 = time.monotonic()
    root = os.path.abspath(root)
    os.makedirs(root, exist_ok=True)
    cases = [generate(seed, i, root) for i in indices]
    for c in cases:
        c.write(1)
    nvrtc = Nvrtc()
    cache = os.path.join(root, "cache")
    jobs = [c.job() for c in cases]
    first = Worker(root, cache)
    old = os.getcwd()
    os.chdir(root)
    try:
        t = first.start(jobs)
        truth1 = [nvrtc.compile(c) for c in cases]
        v1 = dict(first.finish(t, jobs))
        for c in cases:  # what caijit made of the case, for the feature table
            if v1[c.index].get("untrusted"):
                c.features.add("observed:caijit_untrusted_key")
        if progress:
            print(f"  cases {indices[0]}..{indices[-1]}: version 1 compiled ({time.monotonic() - t0:.0f} s)", file=sys.stderr, flush=True)
        for c in cases:
            c.write(2)
        # The same process first: its misses are compiled by NVRTC in a process that has
        # compiled version 1 (and stored on disk, where the fresh process may find them).
        t = first.start(jobs)
        truth2 = [nvrtc.compile(c) for c in cases]
        v2_same = first.finish(t, jobs)
        first.close()
        fresh = Worker(root, cache)
        v2_fresh = fresh.finish(fresh.start(jobs), jobs)
        fresh.close()
    finally:
        os.chdir(old)
    failures: list[Failure] = []
    both_failed = 0
    for c, w1, w2 in zip(cases, truth1, truth2):
        for phase, got, want in (("v1", v1[c.index], w1), ("v2-fresh-process", v2_fresh[c.index], w2), ("v2-same-process", v2_same[c.index], w2)):
            both_failed += not got["ok"] and not want["ok"]
            f = _compare(c, phase, got, want, w1)
            if f:
                failures.append(f)
    effective = sum(1 for a, b in zip(truth1, truth2) if (a["ok"], a["kernels"]) != (b["ok"], b["kernels"]))
    return Report(seed, cases, failures, both_failed, effective, time.monotonic() - t0)


def _signature(d: dict[str, Any]) -> dict[str, Any]:
    """What a bundle hit shows of a result (its `.entry` declarations, not the PTX bodies):
    whether it compiled, and each kernel's symbol and parameter types."""
    if not d["ok"]:
        return {"ok": False, "log": d["log"], "kernels": {}}
    return {"ok": True, "log": "", "kernels": {k: {"symbol": v["symbol"], "params": v["params"]} for k, v in d["kernels"].items()}}


def run_bundle(indices: list[int], seed: int, root: str) -> Report:
    """Bundles against NVRTC: version 1 of every case is compiled (recorded into a manifest)
    and baked into a bundle while headers are edited to version 2 at random moments: some
    before the bake starts, the rest while it runs. Then a process without NVRTC serves each
    case from the bundle, and one with NVRTC from the bundle or by compiling: each result
    must be NVRTC's for the files as they are now (a miss, without NVRTC, is an error, never
    the old code)."""
    t0 = time.monotonic()
    root = os.path.abspath(root)
    os.makedirs(root, exist_ok=True)
    rng = random.Random(seed)
    cases = [generate(seed, i, root) for i in indices]
    for c in cases:
        c.write(1)
    nvrtc = Nvrtc()
    jobs = [c.job() for c in cases]
    manifest = os.path.join(root, "manifest.json")
    old = os.getcwd()
    os.chdir(root)
    try:
        recorder = Worker(root, os.path.join(root, "cache"), CAIJIT_RECORD=manifest)
        truth1 = [nvrtc.compile(c) for c in cases]
        recorder.finish(recorder.start(jobs), jobs)
        recorder.close()
        order = list(cases)
        rng.shuffle(order)
        before = order[: len(order) // 3]
        for c in before:
            c.write(2)
        bundle = os.path.join(root, "b.caijit")
        bake = subprocess.Popen([sys.executable, "-m", "caijit", "bundle", "build", manifest, "--arch", ARCH, "-j", "1", "--no-ptx", "-o", bundle],
                                cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
        for c in order[len(before) :]:
            time.sleep(rng.uniform(0, 0.05))
            c.write(2)
        out, err = bake.communicate(timeout=1200)
        if bake.returncode != 0 and "changed while the bundle was being built" not in err:
            raise RuntimeError(f"bundle build failed: {err[-2000:]}")
        truth2 = [nvrtc.compile(c) for c in cases]
        results = {}
        if bake.returncode == 0:
            no_nvrtc = Worker(root, os.path.join(root, "cache-none"), CAIJIT_BUNDLES=bundle, CAIJIT_CACHE="0",
                              CAIJIT_NVRTC_PATH="/nonexistent/libnvrtc.so")  # fmt: skip
            results["bundle-without-nvrtc"] = no_nvrtc.finish(no_nvrtc.start(jobs), jobs)
            no_nvrtc.close()
            with_nvrtc = Worker(root, os.path.join(root, "cache-bundle"), CAIJIT_BUNDLES=bundle)
            results["bundle-with-nvrtc"] = with_nvrtc.finish(with_nvrtc.start(jobs), jobs)
            with_nvrtc.close()
    finally:
        os.chdir(old)
    failures: list[Failure] = []
    both_failed = 0
    for c, w1, w2 in zip(cases, truth1, truth2):
        for phase, got in ((p, r[c.index]) for p, r in results.items()):
            miss = not got["ok"] and "NVRTC is not available to compile it" in got["log"] and phase == "bundle-without-nvrtc"
            both_failed += not got["ok"] and not w2["ok"]
            f = None if miss else _compare(c, phase, _signature(got), _signature(w2), _signature(w1))
            if f:
                failures.append(f)
    effective = sum(1 for a, b in zip(truth1, truth2) if _signature(a) != _signature(b))
    served = sum(1 for r in results.get("bundle-without-nvrtc", {}).values() if r["ok"])
    return Report(seed, cases, failures, both_failed, effective, time.monotonic() - t0, served)


def _batch(args: tuple[list[int], int, str, bool]) -> Report:
    indices, seed, root, progress = args
    try:
        r = run(indices, seed, root, progress)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if progress:  # one line per batch and per mismatch, for a run stopped early
        kinds = Counter(f"{f.phase} {f.kind}" for f in r.failures)
        print(f"  cases {indices[0]}..{indices[-1]}: {len(r.failed_cases())} mismatched {dict(kinds)}; "
              f"{r.effective_edits} effective edits; {r.seconds:.0f} s", file=sys.stderr, flush=True)  # fmt: skip
        for f in r.failures:
            line = {"seed": f.case.seed, "case": f.case.index, "phase": f.phase, "kind": f.kind, "features": sorted(f.case.features)}
            print("  mismatch " + json.dumps(line), file=sys.stderr, flush=True)
    return r


def run_many(n: int, seed: int, root: str, batch: int = 1000, jobs: int = 1, progress: bool = False) -> Report:
    """[`run`] over cases 0..n-1 in batches of `batch` (each in its own directory under
    `root`, removed after it), `jobs` batches at a time."""
    t0 = time.monotonic()
    parts = [(list(range(i, min(n, i + batch))), seed, os.path.join(root, f"batch{i // batch:04d}"), progress) for i in range(0, n, batch)]
    if jobs > 1:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(jobs) as pool:
            reports = list(pool.map(_batch, parts))
    else:
        reports = [_batch(p) for p in parts]
    return Report(seed, [c for r in reports for c in r.cases], [f for r in reports for f in r.failures], sum(r.both_failed for r in reports),
                  sum(r.effective_edits for r in reports), time.monotonic() - t0)  # fmt: skip


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--cases", type=int, default=int(os.environ.get("CAIJIT_DIFFTEST_CASES", "20000")), help="how many cases (default 20000)")
    p.add_argument("--seed", type=int, default=None, help="the run's seed (default: random, printed)")
    p.add_argument("--case", type=int, default=None, help="only this case of the seed (with --keep, to study its files)")
    p.add_argument("--keep", metavar="DIR", help="with --case: write the case under DIR and keep it")
    p.add_argument("--jobs", type=int, default=1, help="batches compiled at once (each uses about two cores; default 1)")
    p.add_argument("--batch", type=int, default=1000, help="cases per batch (default 1000)")
    p.add_argument("--show", type=int, default=5, help="describe this many mismatches in full (default 5)")
    a = p.parse_args(argv)
    if a.worker:
        _worker()
        return 0
    seed = a.seed if a.seed is not None else random.randrange(2**32)
    print(f"compile differential test: seed {seed}", flush=True)
    if a.case is not None:
        root = a.keep or tempfile.mkdtemp(prefix="caijit-difftest-")
        report = run([a.case], seed, root)
        if not a.keep:
            shutil.rmtree(root, ignore_errors=True)
    else:
        with tempfile.TemporaryDirectory(prefix="caijit-difftest-") as root:
            report = run_many(a.cases, seed, root, a.batch, a.jobs, progress=True)
    print(report.summary())
    for f in report.failures[: a.show]:
        print(f.describe())
    print(f"(reproduce one case: python {os.path.relpath(__file__)} --seed {seed} --case N --keep DIR)")
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())
