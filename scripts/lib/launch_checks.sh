# shellcheck shell=bash
# The launch's checks of what the cluster will need, run by swe_validate (lib/swe_rl_common.sh) in
# every dry run and before every real launch, each recording a problem for the one report:
#   swe_check_launch_inputs   MEGATRON_DIR is a Megatron checkout, PROMPT_DATA an absolute path,
#                             MASTER_ADDR not loopback in a plan of several nodes, `ray` on PATH
#   swe_check_with_plugin     python -m swe_rl.slime.launch_check on slime's full argument list: the
#                             plugin's own refusals (check_options), the prompt rows, the checkpoint's
#                             weights / tokenizer / shape, the Python packages slime's train script needs
# and, for the services the head starts in the background:
#   swe_wait_service URL SECONDS WHAT PID LOG   waits for URL; a PID that exits is reported at once,
#                             with its exit status and the tail of LOG

swe_check_launch_inputs() {
  local train="head worker"
  if [[ -d "${MEGATRON_DIR:-}" && ! -d "$MEGATRON_DIR/megatron/core" && ! -d "$MEGATRON_DIR/megatron/training" ]]; then
    swe_problem "$train" MEGATRON_DIR "$(swe_shown MEGATRON_DIR) is not a Megatron-LM checkout (no megatron/core or megatron/training): git clone NVIDIA/Megatron-LM and check out slime's pin (third_party/training_stack.md)"
  fi
  local name
  for name in PROMPT_DATA EVAL_PROMPT_DATA; do
    if [[ -n "${!name:-}" && "${!name}" != /* ]]; then
      swe_problem head "$name" "$(swe_shown "$name") is a relative path, which the Ray job (run in its own working directory) does not resolve: give an absolute path"
    fi
  done
  if (( ${TRAIN_NODES:-1} > 1 )) && [[ "$MASTER_ADDR" =~ ^(127\.|localhost$|0\.0\.0\.0$|::1$) ]]; then
    swe_problem "head worker" MASTER_ADDR "$(swe_shown MASTER_ADDR) is a loopback address but the plan has $TRAIN_NODES nodes: set MASTER_ADDR to the head's address that the other nodes reach (the same on every node)"
  fi
  if [[ "$DRY_RUN" == "1" || "$ROLE" != "prm" ]] && ! command -v ray >/dev/null; then
    swe_problem "head worker" RAY "ray is not on PATH (PATH=$PATH): install it in the training Python (pip install 'ray[default]', third_party/training_stack.md) and activate that environment"
  fi
}

swe_check_with_plugin() {  # the Python checks, on the arguments the Ray job would get
  [[ "$DRY_RUN" == "1" || "$ROLE" == "head" ]] || return 0
  local out line name origins="" n
  if ! out="$("$PYTHON" -m swe_rl.slime.launch_check --model-name "$MODEL_NAME" -- "${TRAIN_ARGS[@]}" 2>&1)"; then
    swe_problem head PYTHON "PYTHON=$PYTHON [from $(swe_origin PYTHON)] could not run the launch checks (python -m swe_rl.slime.launch_check): $(tail -n 3 <<<"$out" | tr '\n' ' ')"
    return 0
  fi
  for n in EXTRA_TRAIN_ARGS REWARD_POST_PROCESS_PATH DYNAMIC_SAMPLING_FILTER_PATH PLUGIN_CONFIG; do
    [[ "$(swe_origin "$n")" == default ]] || origins+=" $(swe_shown "$n");"
  done
  while IFS=$'\t' read -r name line; do
    [[ -n "$name" ]] || continue
    case "$name" in
      PYTHON) line="$line (PYTHON=$PYTHON [from $(swe_origin PYTHON)])" ;;
      TRAIN_ARGS) line="${line}${origins:+ (set by:${origins%;})}" ;;
      *) if [[ "$line" == "$name=${!name:-}"* ]]; then line="$(swe_shown "$name")${line#"$name=${!name:-}"}"
         else line="$(swe_mask "$line") [from $(swe_origin "$name")]"; fi ;;
    esac
    swe_problem head "$name" "$line"
  done <<<"$out"
}

swe_wait_service() {  # swe_wait_service URL SECONDS WHAT PID LOG
  local url="$1" secs="$2" what="$3" pid="$4" log="$5" rc end=$((SECONDS + $2)) ca=()
  [[ -z "${SWE_WAIT_CA:-}" ]] || ca=(--cacert "$SWE_WAIT_CA")  # an https:// URL's CA (else the system's)
  if [[ "$DRY_RUN" == "1" ]]; then echo "+ wait for $url (up to ${secs}s)"; return 0; fi
  while (( SECONDS < end )); do
    if ! kill -0 "$pid" 2>/dev/null; then
      rc=0; wait "$pid" || rc=$?
      echo "error: the $what exited (status $rc$( (( rc > 128 )) && echo ", signal $((rc - 128))")) before it answered at $url; the end of $log:" >&2
      tail -n 20 "$log" | sed 's/^/  | /' >&2
      exit 2
    fi
    curl -fs -o /dev/null --max-time 5 "${ca[@]}" "$url" && return 0
    sleep 0.5
  done
  echo "error: the $what (pid $pid) did not answer at $url within ${secs}s; the end of $log:" >&2
  tail -n 20 "$log" | sed 's/^/  | /' >&2
  exit 2
}
