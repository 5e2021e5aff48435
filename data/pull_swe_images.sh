#!/usr/bin/env bash
# Pull the Docker images of SWE task instances onto this Docker node.
#
# Images come from IMAGE_LIST (a file, one image per line, '#' comments allowed) or from
# TRAIN (a slime JSONL from data/preprocess_swe_dataset.py: metadata.instance.image_name
# of each row; flat rows with a top-level image_name work too). Duplicates are dropped.
#
#   IMAGE_LIST=~/swe_verified/docker_images.txt bash pull_swe_images.sh
#   N=10 TRAIN=~/train.jsonl bash pull_swe_images.sh            # first 10 images only
#   IMAGE_LIST=images.txt SRC_PREFIX=docker.io/swebench PROXY_PREFIX=mirror.example:5000/swebench \
#     bash pull_swe_images.sh                                    # pull via a mirror, keep names
#
# Settings (environment):
#   IMAGE_LIST    file of image names                    TRAIN        slime JSONL (if no IMAGE_LIST)
#   N             only the first N images (0 = all)      CONCURRENCY  parallel pulls (default 4)
#   RETRIES       attempts per image (default 3)         BACKOFF      seconds before the 2nd attempt,
#                                                                     doubled each time (default 5)
#   SRC_PREFIX    images under this prefix are pulled from PROXY_PREFIX instead, then
#   PROXY_PREFIX  re-tagged to their original name (the proxy tag is removed)
#   FAILED_FILE   where failed images are listed (default ./failed_images.txt; always rewritten)
#   DRY_RUN=1     print the docker commands instead of running them
#   DOCKER        docker command (default docker)        PYTHON       python for TRAIN (default python3)
#
# With SWE_POOL_URL (and SWE_POOL_TOKEN or SWE_POOL_TOKEN_FILE; SWE_CLIENT_CA_FILE for an https:// pool) set, nothing is pulled here: the list goes to the pool's
# POST /prefetch, and the fleet's nodes pull the images ahead within their disk budgets (docs/images.md):
#   SWE_POOL_URL=http://head:18090 SWE_POOL_TOKEN_FILE=~/.swe-rl-pool-token IMAGE_LIST=images.txt bash pull_swe_images.sh
#
# Images already present are skipped. Ends with a summary (pulled / present / failed);
# exits 1 if any image failed, 2 on bad settings.
set -euo pipefail

IMAGE_LIST="${IMAGE_LIST:-}"
TRAIN="${TRAIN:-}"
N="${N:-0}"
CONCURRENCY="${CONCURRENCY:-4}"
RETRIES="${RETRIES:-3}"
BACKOFF="${BACKOFF:-5}"
SRC_PREFIX="${SRC_PREFIX:-}"
PROXY_PREFIX="${PROXY_PREFIX:-}"
FAILED_FILE="${FAILED_FILE:-failed_images.txt}"
DRY_RUN="${DRY_RUN:-0}"
DOCKER="${DOCKER:-docker}"
PYTHON="${PYTHON:-python3}"

die() { echo "error: $*" >&2; exit 2; }

is_count() { [[ "$1" =~ ^[0-9]+$ ]]; }
is_count "$N" || die "N must be a whole number, got '$N'"
is_positive() { is_count "$1" && (("$1" >= 1)); }
is_positive "$CONCURRENCY" || die "CONCURRENCY must be at least 1, got '$CONCURRENCY'"
is_positive "$RETRIES" || die "RETRIES must be at least 1, got '$RETRIES'"
is_count "$BACKOFF" || die "BACKOFF must be whole seconds, got '$BACKOFF'"
if [[ -n "$SRC_PREFIX" && -z "$PROXY_PREFIX" ]] || [[ -z "$SRC_PREFIX" && -n "$PROXY_PREFIX" ]]; then
  die "set SRC_PREFIX and PROXY_PREFIX together"
fi
SRC_PREFIX="${SRC_PREFIX%/}"
PROXY_PREFIX="${PROXY_PREFIX%/}"
if [[ "$DRY_RUN" != 1 ]] && ! command -v "$DOCKER" >/dev/null 2>&1; then
  die "'$DOCKER' not found (install Docker, or DRY_RUN=1 to only print the commands)"
fi

# Image names from a slime JSONL: metadata.instance.image_name (metadata may be a JSON string).
read_train() {
  "$PYTHON" -c '
import json, sys
bad = 0
with open(sys.argv[1], encoding="utf-8") as fh:
    for n, line in enumerate(fh, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            meta = row.get("metadata") or {}
            if isinstance(meta, str):
                meta = json.loads(meta)
            inst = meta.get("instance") if isinstance(meta, dict) else None
            name = (inst or row).get("image_name")
            if not isinstance(name, str) or not name.strip():
                raise ValueError("no metadata.instance.image_name")
        except (ValueError, AttributeError) as exc:
            bad += 1
            print(f"warning: {sys.argv[1]} line {n}: {exc}", file=sys.stderr)
            continue
        print(name.strip())
if bad:
    print(f"warning: {bad} row(s) without an image name skipped", file=sys.stderr)
' "$1"
}

if [[ -n "$IMAGE_LIST" ]]; then
  [[ -f "$IMAGE_LIST" ]] || die "IMAGE_LIST '$IMAGE_LIST' is not a file"
  raw="$(sed -e 's/#.*//' -e 's/^[[:space:]]*//' -e 's/[[:space:]]*$//' "$IMAGE_LIST")"
elif [[ -n "$TRAIN" ]]; then
  [[ -f "$TRAIN" ]] || die "TRAIN '$TRAIN' is not a file"
  raw="$(read_train "$TRAIN")" || die "could not read image names from $TRAIN"
else
  die "set IMAGE_LIST (one image per line) or TRAIN (slime JSONL); see the header of $0"
fi

images=()
while IFS= read -r image; do
  [[ -n "$image" ]] && images+=("$image")
done < <(printf '%s\n' "$raw" | awk 'NF && !seen[$0]++')
if ((N > 0 && ${#images[@]} > N)); then
  images=("${images[@]:0:N}")
fi
((${#images[@]} > 0)) || die "no image names found"

# The fleet's own mechanism: hand the list to the pool, whose nodes pull ahead (one pull per image).
if [[ -n "${SWE_POOL_URL:-}" ]]; then
  printf '%s\n' "${images[@]}" | DRY_RUN="$DRY_RUN" "$PYTHON" -c '
import json, os, sys, urllib.error, urllib.request
body = json.dumps({"images": [line.strip() for line in sys.stdin if line.strip()]}).encode()
url = os.environ["SWE_POOL_URL"].rstrip("/") + "/prefetch"
if os.environ.get("DRY_RUN") == "1":
    print(f"+ POST {url} {body.decode()}")
    sys.exit(0)
import ssl
token = os.environ.get("SWE_POOL_TOKEN", "").strip()
if not token and os.environ.get("SWE_POOL_TOKEN_FILE"):
    with open(os.path.expanduser(os.environ["SWE_POOL_TOKEN_FILE"]), encoding="utf-8") as fh:
        token = fh.read().strip()
tls = ssl.create_default_context(cafile=os.path.expanduser(os.environ.get("SWE_CLIENT_CA_FILE", "")) or None)
req = urllib.request.Request(url, body, {"Content-Type": "application/json", "Authorization": "Bearer " + token})
try:
    with urllib.request.urlopen(req, timeout=60, context=tls) as resp:
        answer = json.load(resp)
except urllib.error.HTTPError as exc:
    text = exc.read().decode(errors="replace")[:300]
    sys.exit(f"error: {url} answered {exc.code}: {text}")
except OSError as exc:
    sys.exit(f"error: {url} unreachable: {exc}")
nodes, count = answer.get("nodes") or {}, answer.get("images")
asked = sum(len(v) for v in nodes.values())
print(f"prefetch: {count} image(s) sent to the pool; {asked} pull(s) asked of {len(nodes)} node(s)")
'
  exit $?
fi

# Echo the docker command (DRY_RUN=1) or run it.
run_docker() {
  if [[ "$DRY_RUN" == 1 ]]; then
    echo "+ $DOCKER $*"
  else
    "$DOCKER" "$@"
  fi
}

# The name to pull: under SRC_PREFIX -> the same path under PROXY_PREFIX ('docker.io/' ignored).
pull_ref() {
  local image="$1" short src
  [[ -n "$SRC_PREFIX" ]] || { echo "$image"; return; }
  short="${image#docker.io/}"
  src="${SRC_PREFIX#docker.io/}"
  if [[ "$short" == "$src/"* ]]; then
    echo "$PROXY_PREFIX/${short#"$src/"}"
  else
    echo "$image"
  fi
}

# Pull one image; appends "<status> <image>" to $RESULTS (status: pulled, present, failed).
pull_one() {
  local image="$1" ref attempt delay log via="" done_word="pulled"
  if [[ "$DRY_RUN" == 1 ]]; then done_word="to pull"; fi
  if "$DOCKER" image inspect "$image" >/dev/null 2>&1; then
    echo "[present] $image"
    echo "present $image" >>"$RESULTS"
    return 0
  fi
  ref="$(pull_ref "$image")"
  if [[ "$ref" != "$image" ]]; then via=" (from $ref)"; fi
  log="$(mktemp)"
  for ((attempt = 1; attempt <= RETRIES; attempt++)); do
    if run_docker pull "$ref" >"$log" 2>&1; then
      if [[ "$ref" == "$image" ]] || { run_docker tag "$ref" "$image" >>"$log" 2>&1 \
          && run_docker rmi "$ref" >>"$log" 2>&1; }; then
        if [[ "$DRY_RUN" == 1 ]]; then cat "$log"; fi
        echo "[$done_word] $image$via (attempt $attempt)"
        echo "pulled $image" >>"$RESULTS"
        rm -f "$log"
        return 0
      fi
    fi
    if ((attempt < RETRIES)); then
      delay=$((BACKOFF * (1 << (attempt - 1))))
      echo "[retry] $image: attempt $attempt failed ($(tail -n 1 "$log")); retrying in ${delay}s" >&2
      sleep "$delay"
    fi
  done
  echo "[failed] $image after $RETRIES attempt(s): $(tail -n 1 "$log")" >&2
  echo "failed $image" >>"$RESULTS"
  rm -f "$log"
  return 0
}

RESULTS="$(mktemp)"
trap 'rm -f "$RESULTS"' EXIT
export DOCKER DRY_RUN RETRIES BACKOFF SRC_PREFIX PROXY_PREFIX RESULTS
export -f run_docker pull_ref pull_one

total=${#images[@]}
dry="" pulled_word="pulled"
if [[ "$DRY_RUN" == 1 ]]; then dry=" (dry run: nothing is pulled)" pulled_word="to pull"; fi
echo "pulling $total image(s), $CONCURRENCY at a time${SRC_PREFIX:+, $SRC_PREFIX via $PROXY_PREFIX}$dry"
# shellcheck disable=SC2016  # $1 is expanded by the inner bash, not here
printf '%s\0' "${images[@]}" | xargs -0 -n 1 -P "$CONCURRENCY" bash -c 'pull_one "$1"' _ \
  || echo "warning: a pull worker exited abnormally; its image is missing from the summary" >&2

count() { grep -c "^$1 " "$RESULTS" || true; }
pulled="$(count pulled)"
present="$(count present)"
failed="$(count failed)"
# Failed images in the order they were listed, so the file can be fed back as IMAGE_LIST.
: >"$FAILED_FILE"
for image in "${images[@]}"; do
  if grep -qxF "failed $image" "$RESULTS"; then echo "$image" >>"$FAILED_FILE"; fi
done
echo "summary: $total image(s): $pulled $pulled_word, $present present, $failed failed$dry"
if ((failed > 0)); then
  echo "failed images are listed in $FAILED_FILE (retry with IMAGE_LIST=$FAILED_FILE)" >&2
  exit 1
fi
