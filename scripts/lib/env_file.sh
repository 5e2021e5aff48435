# shellcheck shell=bash
# Loading .env.swe with the usual precedence: a variable given on the command line or in the
# environment wins over the file, and the file wins over the scripts' defaults. Sourced by every
# script that reads .env.swe (lib/swe_rl_common.sh, launch_sglang_cluster.sh, the eval scripts).
# Every name the file sets is exported: the processes a script starts (the pool server, the Ray job,
# SGLang) read their settings (SWE_EXEC_TOKEN, WANDB_API_KEY, ...) from the environment.
#
#   swe_env_file_load ROOT   # sources ${SWE_ENV_FILE:-ROOT/.env.swe} when present
#   swe_origin NAME          # "environment", ".env.swe (<path>)" or "default": where NAME came from
#
# SWE_ENV_FILE names another file (it must exist; /dev/null reads none); tests point it at a file of
# their own so that a user's .env.swe in the checkout never reaches them.

SWE_ENV_FILE_USED=""
SWE_FILE_NAMES=" "                                      # names the file set (and the environment did not)
SWE_ENV_NAMES=" $(compgen -e | tr '\n' ' ') "           # names the environment gave, before any file

swe_env_file_load() {
  local _swe_file="${SWE_ENV_FILE:-$1/.env.swe}" _swe_name _swe_names
  if [[ ! -e "$_swe_file" ]]; then
    if [[ -n "${SWE_ENV_FILE:-}" ]]; then echo "error: SWE_ENV_FILE=$_swe_file does not exist" >&2; exit 2; fi
    return 0
  fi
  # the names the file assigns (NAME=... or export NAME=...), so that the environment's values survive it
  _swe_names="$(sed -nE 's/^[[:space:]]*(export[[:space:]]+)?([A-Za-z_][A-Za-z0-9_]*)=.*/\2/p' "$_swe_file" | sort -u)"
  local -A _swe_keep=()
  for _swe_name in $_swe_names; do
    if [[ "$SWE_ENV_NAMES" == *" $_swe_name "* ]]; then _swe_keep[$_swe_name]="${!_swe_name}"; fi
  done
  # shellcheck source=/dev/null
  source "$_swe_file"
  for _swe_name in $_swe_names; do
    if [[ -v "_swe_keep[$_swe_name]" ]]; then
      printf -v "$_swe_name" '%s' "${_swe_keep[$_swe_name]}"
      export "${_swe_name?}"
    else
      SWE_FILE_NAMES+="$_swe_name "
      export "${_swe_name?}"
    fi
  done
  SWE_ENV_FILE_USED="$_swe_file"
}

swe_origin() {
  if [[ "$SWE_ENV_NAMES" == *" $1 "* ]]; then echo "environment"
  elif [[ "$SWE_FILE_NAMES" == *" $1 "* ]]; then echo ".env.swe ($SWE_ENV_FILE_USED)"
  else echo "default"
  fi
}
