"""Start-up: bin/imgbuild links only jansson and libseccomp; libcurl,
libarchive, libcrypto, libxml2, libyaml, libelf, zstd, zlib and ISA-L,
with the 40 shared objects they bring, are loaded when a command first
calls one of their functions (common/lazylib.h).
Checked with the dynamic loader's own log (LD_DEBUG=files), which names
every object a process loads, at start ("needed by") or later
("dynamically loaded by")."""
import re

from conftest import imgbuild, write

HEAVY = ("libcurl.so", "libarchive.so", "libcrypto.so", "libxml2.so", "libyaml-0.so",
         "libelf.so", "libzstd.so", "libz.so", "libisal.so")


def loaded(err):
    """Every shared object the loader's log names, with how it came."""
    return dict((m[0], m[1]) for m in re.findall(
        r"file=(\S+) \[0\];  (needed|dynamically loaded) by", err))


def heavy(libs):
    return {name: how for name, how in libs.items() if name.startswith(HEAVY)}


def test_version_loads_none_of_the_heavy_libraries(tmp_path):
    r = imgbuild("version", store=tmp_path / "store", env={"LD_DEBUG": "files"})
    assert r.rc == 0 and r.out.startswith("imgbuild "), r
    libs = loaded(r.err)
    assert libs.get("libc.so.6") == "needed", r.err  # the log is there
    assert heavy(libs) == {}, r.err


def test_a_cached_build_needs_no_network_or_archive_library(base_image, tmp_path):
    write(tmp_path / "a.txt", "a\n")
    write(tmp_path / "r.recipe",
          f"FROM {base_image}\n"
          "ENV A=1\n"
          "RUN echo built > /built\n"
          "COPY a.txt /a.txt\n"
          "LABEL x=y\n"
          "OUTPUT type=image,name=startup-test\n")
    store = tmp_path / "store"
    env = {"LD_DEBUG": "files"}
    first = imgbuild("build", "r.recipe", store=store, cwd=tmp_path, env=env)
    assert first.rc == 0, first.err[-3000:]
    # the first build pulls and writes layers: the libraries come when used
    libs = heavy(loaded(first.err))
    assert libs.get("libcurl.so.4") == "dynamically loaded", libs
    assert libs.get("libarchive.so.13") == "dynamically loaded", libs
    again = imgbuild("build", "r.recipe", store=store, cwd=tmp_path, env=env)
    assert again.rc == 0, again.err[-3000:]
    assert "(4 steps cached, 0 run)" in again.err, again.err[-3000:]
    # the cached one hashes (libcrypto) and nothing more
    assert heavy(loaded(again.err)) == {"libcrypto.so.3": "dynamically loaded"}, again.err[-3000:]
