/* builder/wheel/lazy_elf.c — libelf, loaded on its first use
 * (common/lazylib.h): a stub per function imgbuild calls, checked by the
 * compiler against <libelf.h> and <gelf.h>. */
#include "common/lazylib.h"

#include <gelf.h>
#include <libelf.h>

IB_LAZYLIB (elf_lib, IB_SONAME_ELF, "ELF files (wheel audits)");

IB_LAZY (elf_lib, Elf *, elf_begin, (int a0, Elf_Cmd a1, Elf *a2), (a0, a1, a2))
IB_LAZY (elf_lib, int, elf_end, (Elf *a0), (a0))
IB_LAZY (elf_lib, const char *, elf_errmsg, (int a0), (a0))
IB_LAZY (elf_lib, Elf_Data *, elf_getdata, (Elf_Scn *a0, Elf_Data *a1), (a0, a1))
IB_LAZY (elf_lib, int, elf_getphdrnum, (Elf *a0, size_t *a1), (a0, a1))
IB_LAZY (elf_lib, int, elf_getshdrstrndx, (Elf *a0, size_t *a1), (a0, a1))
IB_LAZY (elf_lib, Elf_Kind, elf_kind, (Elf *a0), (a0))
IB_LAZY (elf_lib, Elf_Scn *, elf_nextscn, (Elf *a0, Elf_Scn *a1), (a0, a1))
IB_LAZY (elf_lib, char *, elf_rawfile, (Elf *a0, size_t *a1), (a0, a1))
IB_LAZY (elf_lib, char *, elf_strptr, (Elf *a0, size_t a1, size_t a2), (a0, a1, a2))
IB_LAZY (elf_lib, unsigned int, elf_version, (unsigned int a0), (a0))
IB_LAZY (elf_lib, int, gelf_getclass, (Elf *a0), (a0))
IB_LAZY (elf_lib, GElf_Dyn *, gelf_getdyn, (Elf_Data *a0, int a1, GElf_Dyn *a2), (a0, a1, a2))
IB_LAZY (elf_lib, GElf_Ehdr *, gelf_getehdr, (Elf *a0, GElf_Ehdr *a1), (a0, a1))
IB_LAZY (elf_lib, size_t, gelf_getnote, (Elf_Data *a0, size_t a1, GElf_Nhdr *a2, size_t *a3, size_t *a4), (a0, a1, a2, a3, a4))
IB_LAZY (elf_lib, GElf_Phdr *, gelf_getphdr, (Elf *a0, int a1, GElf_Phdr *a2), (a0, a1, a2))
IB_LAZY (elf_lib, GElf_Shdr *, gelf_getshdr, (Elf_Scn *a0, GElf_Shdr *a1), (a0, a1))
IB_LAZY (elf_lib, GElf_Sym *, gelf_getsym, (Elf_Data *a0, int a1, GElf_Sym *a2), (a0, a1, a2))
IB_LAZY (elf_lib, GElf_Vernaux *, gelf_getvernaux, (Elf_Data *a0, int a1, GElf_Vernaux *a2), (a0, a1, a2))
IB_LAZY (elf_lib, GElf_Verneed *, gelf_getverneed, (Elf_Data *a0, int a1, GElf_Verneed *a2), (a0, a1, a2))
