/* builder/wheel/elf.c — ELF objects read through libelf (elfutils) for
 * the audit: class, machine and OS ABI, the interpreter, DT_NEEDED,
 * RPATH / RUNPATH, the versions needed (.gnu.version_r), undefined
 * symbols and Python extension markers (.dynsym), the x86-64 ISA level
 * (GNU property note).  See wheel-int.h.
 */
#include "builder/wheel/wheel-int.h"
#include "common/util.h"

#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <stdlib.h>
#include <string.h>

#define IB_GNU_PROPERTY_X86_ISA_1_NEEDED 0xc0008002u

void
ibw_elf_info_free (elf_info_t *i)
{
  if (!i)
    return;
  free (i->path);
  free (i->interp);
  ib_strv_free (i->needed);
  ib_strv_free (i->rpath);
  ib_strv_free (i->runpath);
  ibw_smap_clear (&i->verneed);
  ib_strv_free (i->undef);
  free (i);
}

const char *
ibw_base_arch (const elf_info_t *i)
{
  bool le = i->data == ELFDATA2LSB;
  switch (i->machine)
    {
    case EM_386: return i->cls == ELFCLASS32 && le ? "i686" : NULL;
    case EM_X86_64: return i->cls == ELFCLASS64 && le ? "x86_64" : NULL;
    case EM_PPC64: return i->cls == ELFCLASS64 ? (le ? "ppc64le" : "ppc64") : NULL;
    case EM_AARCH64: return i->cls == ELFCLASS64 && le ? "aarch64" : NULL;
    case EM_S390: return i->cls == ELFCLASS64 && !le ? "s390x" : NULL;
    case EM_ARM: return i->cls == ELFCLASS32 && le ? "armv7l" : NULL;
    case EM_RISCV: return i->cls == ELFCLASS64 && le ? "riscv64" : NULL;
#ifdef EM_LOONGARCH
    case EM_LOONGARCH: return i->cls == ELFCLASS64 && le ? "loongarch64" : NULL;
#endif
    default: return NULL;
    }
}

static bool
osabi_compatible (int a, int b)
{
  /* NONE/SYSV (0) and GNU/LINUX (3) load together */
  return a == b || ((a == 0 || a == 3) && (b == 0 || b == 3));
}

/* Read `path`.  *out NULL (and 0 returned) when the file is no ELF object.
 * `modname`: the Python module name the file would be (its name up to the
 * first '.'), to recognize an extension's init function; NULL: not asked. */
int
ibw_elf_read (const char *path, const char *modname, elf_info_t **out, ib_error_t *err)
{
  *out = NULL;
  cleanup_close int fd = open (path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return ib_error_sys (err, errno, "open %s", path);
  Elf *e = elf_begin (fd, ELF_C_READ_MMAP, NULL);
  if (!e)
    return 0;
  if (elf_kind (e) != ELF_K_ELF)
    {
      elf_end (e);
      return 0;
    }
  GElf_Ehdr eh;
  if (!gelf_getehdr (e, &eh))
    {
      elf_end (e);
      return 0; /* a truncated header: pyelftools fails too, "not an ELF" */
    }
  elf_info_t *i = xmalloc (sizeof *i);
  i->path = xstrdup (path);
  i->cls = gelf_getclass (e);
  i->data = eh.e_ident[EI_DATA];
  i->machine = eh.e_machine;
  i->osabi = eh.e_ident[EI_OSABI];
  cleanup_free char *py3 = modname ? xasprintf ("PyInit_%s", modname) : NULL;
  cleanup_free char *py2 = modname ? xasprintf ("init%s", modname) : NULL;
  cleanup_free char *pypy = modname ? xasprintf ("_cffi_pypyinit_%s", modname) : NULL;

  size_t phnum = 0;
  if (elf_getphdrnum (e, &phnum) == 0)
    for (size_t k = 0; k < phnum; k++)
      {
        GElf_Phdr ph;
        if (gelf_getphdr (e, (int) k, &ph) && ph.p_type == PT_INTERP)
          {
            size_t sz = 0;
            char *raw = elf_rawfile (e, &sz);
            if (raw && ph.p_offset < sz && ph.p_filesz <= sz - ph.p_offset)
              i->interp = xstrndup (raw + ph.p_offset, ph.p_filesz);
            break;
          }
      }
  size_t shstrndx = 0;
  elf_getshdrstrndx (e, &shstrndx);
  bool seen_dynamic = false, seen_verneed = false, seen_dynsym = false, seen_prop = false;
  bool has_runpath = false;
  for (Elf_Scn *scn = elf_nextscn (e, NULL); scn; scn = elf_nextscn (e, scn))
    {
      GElf_Shdr sh;
      if (!gelf_getshdr (scn, &sh))
        continue;
      const char *sname = elf_strptr (e, shstrndx, sh.sh_name);
      Elf_Data *d = NULL;
      if (sh.sh_type == SHT_DYNAMIC && !seen_dynamic && sh.sh_entsize)
        {
          seen_dynamic = true;
          d = elf_getdata (scn, NULL);
          for (size_t k = 0; d && k < sh.sh_size / sh.sh_entsize; k++)
            {
              GElf_Dyn dyn;
              if (!gelf_getdyn (d, (int) k, &dyn))
                break;
              if (dyn.d_tag == DT_NULL)
                break;
              if (dyn.d_tag != DT_NEEDED && dyn.d_tag != DT_RPATH && dyn.d_tag != DT_RUNPATH)
                continue;
              const char *s = elf_strptr (e, sh.sh_link, dyn.d_un.d_val);
              if (!s)
                continue;
              if (dyn.d_tag == DT_NEEDED)
                ib_strv_push (&i->needed, s);
              else if (dyn.d_tag == DT_RPATH)
                ibw_split_path_list (s, &i->rpath);
              else
                {
                  ibw_split_path_list (s, &i->runpath);
                  has_runpath = true;
                }
            }
        }
      else if (sh.sh_type == SHT_GNU_verneed && !seen_verneed
               && (!sname || strcmp (sname, ".gnu.version_r") == 0))
        {
          seen_verneed = true;
          d = elf_getdata (scn, NULL);
          size_t off = 0;
          for (size_t k = 0; d && k < sh.sh_info; k++)
            {
              GElf_Verneed vn;
              if (!gelf_getverneed (d, (int) off, &vn))
                break;
              const char *file = elf_strptr (e, sh.sh_link, vn.vn_file);
              bool skip = !file || ib_str_has_prefix (file, "ld-linux")
                          || strcmp (file, "ld64.so.2") == 0 || strcmp (file, "ld64.so.1") == 0;
              size_t aoff = off + vn.vn_aux;
              for (size_t j = 0; j < vn.vn_cnt; j++)
                {
                  GElf_Vernaux va;
                  if (!gelf_getvernaux (d, (int) aoff, &va))
                    break;
                  const char *vname = elf_strptr (e, sh.sh_link, va.vna_name);
                  if (!skip && vname)
                    ibw_strv_add_unique (&ibw_smap_get (&i->verneed, file)->vals, vname);
                  if (!va.vna_next)
                    break;
                  aoff += va.vna_next;
                }
              if (!vn.vn_next)
                break;
              off += vn.vn_next;
            }
        }
      else if (sh.sh_type == SHT_DYNSYM && !seen_dynsym && sh.sh_entsize)
        {
          seen_dynsym = true;
          d = elf_getdata (scn, NULL);
          for (size_t k = 0; d && k < sh.sh_size / sh.sh_entsize; k++)
            {
              GElf_Sym sym;
              if (!gelf_getsym (d, (int) k, &sym))
                break;
              const char *n = elf_strptr (e, sh.sh_link, sym.st_name);
              if (!n)
                continue;
              int type = GELF_ST_TYPE (sym.st_info), bind = GELF_ST_BIND (sym.st_info);
              bool undef = sym.st_shndx == SHN_UNDEF;
              if (undef && bind != STB_WEAK && *n)
                ib_strv_push (&i->undef, n);
              if (modname && !undef && type == STT_FUNC && !i->pyext)
                {
                  if (strcmp (n, py3) == 0)
                    i->pyext = true;
                  else if (strcmp (n, py2) == 0 || strcmp (n, pypy) == 0)
                    i->pyext = i->py2 = true;
                }
              if (undef && (type == STT_FUNC || type == STT_NOTYPE)
                  && (strcmp (n, "PyFPE_jbuf") == 0 || strcmp (n, "PyFPE_dummy") == 0
                      || strcmp (n, "PyFPE_counter") == 0))
                i->pyfpe = true;
              if (undef && type == STT_FUNC && strstr (n, "PyUnicodeUCS2_"))
                i->ucs2 = true;
            }
        }
      else if (sh.sh_type == SHT_NOTE && !seen_prop && i->machine == EM_X86_64)
        {
          d = elf_getdata (scn, NULL);
          GElf_Nhdr nh;
          size_t off = 0, noff, doff;
          while (d && (off = gelf_getnote (d, off, &nh, &noff, &doff)) > 0)
            {
              if (nh.n_type != NT_GNU_PROPERTY_TYPE_0 || nh.n_namesz != 4
                  || memcmp ((char *) d->d_buf + noff, "GNU", 4) != 0)
                continue;
              seen_prop = true;
              const unsigned char *p = (const unsigned char *) d->d_buf + doff;
              const unsigned char *end = p + nh.n_descsz;
              size_t align = i->cls == ELFCLASS64 ? 8 : 4;
              while (p + 8 <= end)
                {
                  uint32_t type, sz;
                  memcpy (&type, p, 4);
                  memcpy (&sz, p + 4, 4);
                  if (type == IB_GNU_PROPERTY_X86_ISA_1_NEEDED && sz == 4 && p + 12 <= end)
                    {
                      uint32_t v;
                      memcpy (&v, p + 8, 4);
                      v &= ~1u;
                      i->isa_level = (v & 8) ? 4 : (v & 4) ? 3 : (v & 2) ? 2 : 0;
                      break;
                    }
                  p += 8 + ((sz + align - 1) / align) * align;
                }
              break;
            }
        }
    }
  if (has_runpath)
    {
      /* both set: only RUNPATH counts (the loader, and lddtree) */
      ib_strv_free (i->rpath);
      i->rpath = NULL;
    }
  ib_strv_sort (i->undef);
  elf_end (e);
  *out = i;
  return 0;
}

bool
ibw_elf_compatible (const elf_info_t *a, const elf_info_t *b)
{
  return a->cls == b->cls && a->data == b->data && a->machine == b->machine
         && osabi_compatible (a->osabi, b->osabi);
}
