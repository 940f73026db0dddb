# bash completion for imgbuild                             -*- shell-script -*-
#
# Commands, options and their values are read from imgbuild's own usage text
# (`imgbuild --help`, `imgbuild COMMAND --help`), so they follow the binary;
# image names from `imgbuild images --noheading` (in the store the command
# line names with --store, if any).  Needs nothing but bash (the
# bash-completion package is not required).  Installed by `make install` in
# $(datadir)/bash-completion/completions/imgbuild.

# The words of the usage text that name options (--name, -x), one a line.
_imgbuild_options() { # usage text on stdin
  grep -oE -- '(^|[][ ,|(])--?[a-zA-Z][a-zA-Z0-9-]*' | sed -E 's/^[][ ,|(]//' | sort -u
}

# The value an option's usage gives it: "DIR", "a|b|c" ..., or nothing for
# an option that takes none (--json], --quiet  ...).
_imgbuild_option_value() { # option, usage text on stdin
  grep -oE -- "(^|[][ ,(])$1[ =][^] ]+" | head -1 | sed -E "s/^.*$1[ =]//"
}

_imgbuild() {
  local bin=${COMP_WORDS[0]}
  # Words as the shell will split them, not as COMP_WORDBREAKS does (image
  # names hold ':', options '='): the line up to the cursor, by blanks.
  local line=${COMP_LINE:0:COMP_POINT} words=() cur=
  read -ra words <<< "$line"
  if [[ $line =~ [[:space:]]$ ]]; then cur=; else cur=${words[-1]}; unset 'words[-1]'; fi

  local help cmd= store=() i w
  help=$("$bin" --help 2>/dev/null) || return 0
  local commands
  commands=$(awk '/^Commands:/ { on = 1; next } /^Global options/ { on = 0 }
                  on && /^  [^ ]/ { n = $1; gsub(/[][]/, "", n); print n }' <<< "$help" | sort -u)
  # The command: the first word that is not an option or an option's value.
  for ((i = 1; i < ${#words[@]}; i++)); do
    w=${words[i]}
    case $w in
      --store) store=(--store "${words[i+1]}") ;;
      --store=*) store=(--store "${w#--store=}") ;;
    esac
    if [[ -z $cmd && $w != -* ]]; then
      local prev=${words[i-1]}
      if [[ $i -gt 1 && $prev == -* && $prev != *=* && -n $(_imgbuild_option_value "$prev" <<< "$help") ]]; then
        continue
      fi
      cmd=$w
    fi
  done
  local usage=$help
  [[ -n $cmd ]] && usage=$("$bin" "$cmd" --help 2>/dev/null)$'\n'$(sed -n '/^Global options/,$p' <<< "$help")

  local candidates= prefix= opt= value=
  if [[ $cur == --*=* ]]; then
    opt=${cur%%=*}; prefix=${opt}=; cur=${cur#*=}
  elif [[ ${#words[@]} -gt 1 && ${words[-1]} == -* && ${words[-1]} != *=* ]]; then
    opt=${words[-1]}
  fi
  [[ -n $opt ]] && value=$(_imgbuild_option_value "$opt" <<< "$usage")
  case $value in # the usage text names these two MODE, and lists them in words
    MODE) case $opt in
            --userns) value="auto|root|map|single" ;;
            --progress) value="auto|tty|plain|json|quiet" ;;
          esac ;;
  esac
  if [[ -n $value ]]; then
    value=${value#[}; value=${value%]}; value=${value#=}
    if [[ $value == *'|'* && $value != *[A-Z]* ]]; then
      candidates=${value//|/$'\n'}
    else
      case $value in
        DIR|*-DIR) COMPREPLY=($(compgen -d -- "$cur")) ;;
        FILE|F|RECIPE|*FILE*|SOCKET) COMPREPLY=($(compgen -f -- "$cur")) ;;
        *) COMPREPLY=() ;;
      esac
      [[ -n $prefix ]] && COMPREPLY=("${COMPREPLY[@]/#/$prefix}")
      return 0
    fi
  elif [[ $cur == -* ]]; then
    candidates=$(_imgbuild_options <<< "$usage")
  elif [[ -z $cmd ]]; then
    candidates=$commands
    # `imgbuild RECIPE` builds: files when no command matches
    [[ -n $cur && -z $(compgen -W "$commands" -- "$cur") ]] && COMPREPLY=($(compgen -f -- "$cur"))
  else
    case $cmd in
      build|plan) COMPREPLY=($(compgen -f -- "$cur")); return 0 ;;
      wheel) candidates=$'audit\nrepair' ;;
      artifact) candidates=$'push\npull' ;;
      run|inspect|unpack|push|pull|tag|rmi|save)
        candidates=$("$bin" "${store[@]}" images --noheading 2>/dev/null | awk '$1 != "<none>" { print $1 }') ;;
    esac
  fi
  local IFS=$'\n'
  COMPREPLY+=($(compgen -P "$prefix" -W "$candidates" -- "$cur"))
  # bash replaces only the part of the word after its last ':' or '='.
  local full=$prefix$cur
  local broken=${full%"${full##*[:=]}"}
  if [[ -n $broken ]]; then
    for i in "${!COMPREPLY[@]}"; do COMPREPLY[i]=${COMPREPLY[i]#"$broken"}; done
  fi
}
complete -F _imgbuild imgbuild
