# shellcheck shell=bash
# swe_plain_lines: a filter for logs that are not a terminal. A progress bar redraws its line with
# carriage returns; written to a file that is one long line of every frame. Each line keeps only
# its last frame (the final state), and apt's needrestart chatter is dropped.
swe_plain_lines() {
  awk '{
    n = split($0, frames, "\r"); line = ""
    for (i = n; i > 0; i--) if (frames[i] != "") { line = frames[i]; break }
    if (line ~ /^(Scanning processes|Scanning candidates|Scanning linux images|Running kernel seems|No services need|No containers need|No user sessions|No VM guests)/) next
    print line; fflush()
  }'
}
