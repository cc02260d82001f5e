"""qjit/_lib.py against the C header it mirrors (runtime/include/qjit/qjit_c.h):
every struct's size, field names and offsets as a C compiler lays them out,
and every function of the header declared with as many arguments.

Needs a C compiler (`cc`, `gcc` or `c++`); set QJIT_REQUIRE_LIBRARY=1 (CI
does) to fail rather than skip without one. No GPU, no library needed.
"""
import ctypes
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)
from qjit import _lib  # noqa: E402
from support import REQUIRED  # noqa: E402

HEADER_DIR = os.environ.get("QJIT_INCLUDE") or os.path.join(HERE, "..", "..", "runtime", "include")
HEADER = os.path.join(HEADER_DIR, "qjit", "qjit_c.h")


def header_text():
    with open(HEADER) as f:
        return re.sub(r"/\*.*?\*/", "", f.read(), flags=re.S)


def header_structs(text):
    """{typedef name: [field names]} of the header's `typedef struct {...} name;`."""
    out = {}
    for body, name in re.findall(r"typedef struct\s*\{(.*?)\}\s*(\w+)\s*;", text, flags=re.S):
        fields = []
        for decl in body.split(";"):
            decl = decl.strip()
            if not decl:
                continue
            # "int k, n, bits, g" or "const void* x": names after the type
            parts = [p.strip() for p in decl.split(",")]
            fields.append(re.findall(r"(\w+)$", parts[0])[0])
            fields += [re.findall(r"(\w+)$", p)[0] for p in parts[1:]]
        out[name] = fields
    return out


def header_functions(text):
    """{name: argument count} of the header's functions."""
    out = {}
    for name, args in re.findall(r"\b(?:qjit_status|const char\s*\*|void)\s*(qjit_\w+)\s*\(([^)]*)\)\s*;", text):
        args = args.strip()
        out[name] = 0 if args in ("", "void") else len(args.split(","))
    return out


class HeaderAgreement(unittest.TestCase):
    def test_every_function_is_declared(self):
        funcs = header_functions(header_text())
        self.assertGreaterEqual(len(funcs), 8, "the header's functions were not found: %s" % funcs)
        self.assertEqual(sorted(funcs), sorted(_lib.ENTRIES))
        for name, count in funcs.items():
            self.assertEqual(len(_lib.ENTRIES[name]), count, name)

    def test_struct_fields_in_order(self):
        structs = header_structs(header_text())
        self.assertEqual(sorted(structs), sorted(s.c_name for s in _lib.STRUCTS))
        for s in _lib.STRUCTS:
            self.assertEqual([f for f, _ in s._fields_], structs[s.c_name], s.c_name)

    def test_sizes_and_offsets_match_the_compiler(self):
        cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("c++")
        if not cc:
            if REQUIRED:
                self.fail("no C compiler (cc, gcc or c++) to check the struct layouts")
            self.skipTest("no C compiler")
        lines = ['#include <stdio.h>', '#include <stddef.h>', '#include "qjit/qjit_c.h"', "int main(void) {"]
        for s in _lib.STRUCTS:
            lines.append('printf("%s sizeof %%zu\\n", sizeof(%s));' % (s.c_name, s.c_name))
            for f, _ in s._fields_:
                lines.append('printf("%s %s %%zu\\n", offsetof(%s, %s));' % (s.c_name, f, s.c_name, f))
        lines += ["return 0;", "}"]
        with tempfile.TemporaryDirectory() as tmp:
            src, exe = os.path.join(tmp, "layout.c"), os.path.join(tmp, "layout")
            with open(src, "w") as f:
                f.write("\n".join(lines))
            lang = ["-x", "c++"] if cc.endswith("c++") else []
            subprocess.run([cc] + lang + ["-I", HEADER_DIR, src, "-o", exe], check=True)
            out = subprocess.run([exe], stdout=subprocess.PIPE, universal_newlines=True, check=True).stdout
        c = {}
        for line in out.splitlines():
            struct, field, value = line.split()
            c[(struct, field)] = int(value)
        for s in _lib.STRUCTS:
            self.assertEqual(ctypes.sizeof(s), c[(s.c_name, "sizeof")], s.c_name)
            for f, _ in s._fields_:
                self.assertEqual(getattr(s, f).offset, c[(s.c_name, f)], "%s.%s" % (s.c_name, f))

    def test_packed_structs_equal_the_ctypes_constructor(self):
        """_lib.packer(cls)(*fields), the ops' fast marshalling, makes the bytes cls(*fields) makes."""
        texts = [("text %d" % i).encode() for i in range(40)]  # alive for the whole test: fields point into them
        for s in _lib.STRUCTS:
            # distinct values per field, negative ints too; void* above 2^32; char* the address of a text
            fields = []
            for i, (_, t) in enumerate(s._fields_):
                if t is ctypes.c_char_p:
                    fields.append(ctypes.cast(ctypes.c_char_p(texts[i]), ctypes.c_void_p).value)
                elif t is ctypes.c_void_p:
                    fields.append((i + 1) << 33)
                else:
                    fields.append(-3 - i if i % 3 == 0 else i + 1)
            packed, made = _lib.packer(s)(*fields), s(*fields)
            self.assertIs(type(packed), bytes)
            self.assertEqual(packed, bytes(made), s.c_name)
            back = s.from_buffer_copy(packed)
            for name, _ in s._fields_:
                self.assertEqual(getattr(back, name), getattr(made, name), "%s.%s" % (s.c_name, name))
        zero = _lib.WqGemmArgs.from_buffer_copy(_lib.packer(_lib.WqGemmArgs)(*[0] * len(_lib.WqGemmArgs._fields_)))
        self.assertIsNone(zero.zero, "0 is NULL")

    def test_struct_entries_take_the_packed_bytes_in_place(self):
        """A struct entry's argument is declared char*: ctypes passes the bytes object's own buffer, which C
        reads as the struct, so it must be aligned as the struct is (8 bytes: its pointers)."""
        for name, cls in _lib.STRUCT_ENTRIES.items():
            self.assertEqual(_lib.ENTRIES[name], [ctypes.c_char_p, ctypes.c_void_p], name)
            self.assertIn(cls, _lib.STRUCTS)
            for i in range(50):  # bytes objects of the struct's size, made as the ops make them
                packed = _lib.packer(cls)(*[i] * len(cls._fields_))
                address = ctypes.cast(ctypes.c_char_p(packed), ctypes.c_void_p).value
                self.assertEqual(address % ctypes.alignment(cls), 0, "%s: bytes at %#x" % (name, address))
                self.assertEqual(ctypes.string_at(address, len(packed)), packed)

if __name__ == "__main__":
    unittest.main()
