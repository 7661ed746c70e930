#!/usr/bin/env bash
# crosstalk end to end with real libvirt guests (QEMU software emulation,
# TCG), on a Debian 12 host as root, without systemd.
#
#   e2e/libvirt/run.sh            # exit 0 pass, 1 fail, 77 skip (QEMU/libvirt cannot be installed)
#
# It installs QEMU, libvirt and busybox-static from Debian when missing,
# starts its own libvirtd in a private mount namespace (its /run/libvirt,
# /var/lib/libvirt, /etc/libvirt … are tmpfs there, so it never meets a
# libvirtd the host runs), builds the static crosstalk binary into a
# busybox initramfs, and boots three 1-vCPU guests whose init runs
# `crosstalk load`:
#
#   ct-libvirt-victim     CPU 1   chase (a busy, latency-bound guest)
#   ct-libvirt-bystander  CPU 0   cpu --rate (a light steady service)
#   ct-libvirt-polluter   CPU 1   cpu (a CPU hog), started once the agent
#                                 has learned the victim's quiet waits, with
#                                 eight times the victim's CPU weight
#
# Under TCG a guest's split locks are no host bus locks (QEMU runs them as
# ordinary host code, stopping its own vCPUs), so what the polluter does to
# the victim is CPU-time contention: the victim's vCPU waits for CPU 1. Two
# guests of equal weight would share it fairly, half each, which crosstalk
# leaves alone; with its weight the polluter takes eight ninths of it, far
# over an equal share, which the agent (cpu_wait.prove on) proves. The
# real agent (`crosstalk run`, temp state dir) must find the domains by name
# and UUID, prove the polluter, throttle it through libvirt (virsh
# schedinfo shows it) and never the others, keep it throttled across a
# libvirtd restart, and restore it on SIGTERM. Then the must-holds: a
# second agent throttles it again and is killed with -9; libvirtd is
# stopped; a third agent starting without libvirt must lift the throttle
# through the cgroup files (and say so loudly), and resync libvirt when it
# comes back.
#
# It leaves nothing behind, pass or fail: guests destroyed, daemons and
# agents killed (by PID), their cgroups and the temp dir removed. The guest
# kernel is cached in $CT_LIBVIRT_CACHE (default /var/cache/crosstalk/e2e-libvirt).
# Run time: about 1.5-2 minutes on 2 CPUs with packages installed.
set -euo pipefail
SKIP=77
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
CACHE=${CT_LIBVIRT_CACHE:-/var/cache/crosstalk/e2e-libvirt}
START=$(date +%s)
log() { echo "e2e: [$(( $(date +%s) - START ))s] $*"; }

if [ "${1:-}" != "--inner" ]; then
  # ---- outer: prerequisites, then the run in a private mount namespace ----
  [ "$(id -u)" = 0 ] || { echo "SKIP: needs root (libvirtd, cgroups)"; exit $SKIP; }
  export DEBIAN_FRONTEND=noninteractive
  need=()
  command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
  [ -x /usr/sbin/libvirtd ] && [ -e /usr/lib/x86_64-linux-gnu/libvirt/connection-driver/libvirt_driver_qemu.so ] || need+=(libvirt-daemon libvirt-daemon-driver-qemu)
  command -v virsh >/dev/null || need+=(libvirt-clients)
  { [ -x /bin/busybox ] && ! ldd /bin/busybox >/dev/null 2>&1; } || need+=(busybox-static)
  command -v xz >/dev/null || need+=(xz-utils)
  command -v unshare >/dev/null || need+=(util-linux)
  if [ ${#need[@]} -gt 0 ]; then
    log "installing ${need[*]}"
    if ! { apt-get -o DPkg::Lock::Timeout=300 update -q >/dev/null &&
           apt-get -o DPkg::Lock::Timeout=300 install -y -q --no-install-recommends "${need[@]}" >/dev/null; }; then
      echo "SKIP: cannot install ${need[*]} from the Debian archive (QEMU/libvirt unavailable here)"
      exit $SKIP
    fi
  fi
  # The qemu driver refuses to start without its compiled-in user, even when
  # qemu.conf says root (the libvirt-daemon-system package would create it).
  id libvirt-qemu >/dev/null 2>&1 || useradd --system --user-group --no-create-home -s /usr/sbin/nologin libvirt-qemu
  # Guest kernel: the bzImage of Debian's kernel package, unpacked to the raw
  # vmlinux (PVH entry: no decompressor to emulate), cached.
  mkdir -p "$CACHE"
  tmpk=""
  trap 'rm -rf "$tmpk"' EXIT
  if [ ! -s "$CACHE/vmlinux" ]; then
    log "fetching the guest kernel into $CACHE"
    # (Readers here stop early on purpose — awk at the first match, xz at
    # the end of its stream — so the writers' SIGPIPE is no failure.)
    set +o pipefail
    kpkg=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-/{print $2; exit}')
    tmpk=$(mktemp -d /tmp/ct-libvirt-kernel.XXXXXX)
    if [ -z "$kpkg" ] || ! (cd "$tmpk" && apt-get download -q "$kpkg" >/dev/null 2>&1); then
      rm -rf "$tmpk"; echo "SKIP: cannot download the guest kernel (${kpkg:-linux-image-amd64})"; exit $SKIP
    fi
    dpkg-deb --fsys-tarfile "$tmpk"/*.deb | tar -xO --wildcards './boot/vmlinuz-*' > "$tmpk/vmlinuz"
    off=$(LC_ALL=C grep -m1 -aboP '\xFD7zXZ\x00' "$tmpk/vmlinuz" | cut -d: -f1)
    tail -c +$((${off:-0} + 1)) "$tmpk/vmlinuz" | xz -dc --single-stream > "$tmpk/vmlinux" 2>/dev/null
    set -o pipefail
    [ "$(head -c 4 "$tmpk/vmlinux" | od -An -c | tr -d ' ')" = '177ELF' ] || { rm -rf "$tmpk"; echo "FAIL: could not unpack the guest kernel from $kpkg"; exit 1; }
    mv "$tmpk/vmlinux" "$CACHE/vmlinux"
    rm -rf "$tmpk"
  fi
  W=$(mktemp -d /tmp/ct-libvirt-e2e.XXXXXX)
  export W
  # Mount points for the namespace's tmpfs; any we create here we remove.
  created=()
  for d in /run/libvirt /var/lib/libvirt /var/cache/libvirt /var/log/libvirt /etc/libvirt; do
    [ -d "$d" ] || { mkdir -p "$d"; created+=("$d"); }
  done
  machine_existed=0
  for c in /sys/fs/cgroup/cpu/machine /sys/fs/cgroup/machine /sys/fs/cgroup/unified/machine; do
    [ -d "$c" ] && machine_existed=1
  done
  outer_cleanup() {
    # libvirt removes a domain's cgroups when it ends; these are for a run
    # that died before it could.
    find /sys/fs/cgroup -mindepth 1 -maxdepth 6 -depth -type d -name '*ct-libvirt*' -exec rmdir {} \; 2>/dev/null || true
    if [ "$machine_existed" = 0 ]; then
      for c in /sys/fs/cgroup/*/machine /sys/fs/cgroup/machine; do [ -d "$c" ] && rmdir "$c" 2>/dev/null || true; done
    fi
    for d in "${created[@]}"; do rmdir "$d" 2>/dev/null || true; done
    rm -rf "$W" "$tmpk"
  }
  trap outer_cleanup EXIT
  if [ -z "${CROSSTALK:-}" ]; then
    log "building the static crosstalk binary"
    (cd "$REPO" && CGO_ENABLED=0 go build -trimpath -o "$W/crosstalk" ./cmd/crosstalk)
    CROSSTALK=$W/crosstalk
  fi
  # The libvirt client's live test (vcpupin, emulatorpin, domstats,
  # scheduler parameters against the real daemon), run inside too.
  if command -v go >/dev/null; then
    (cd "$REPO" && CGO_ENABLED=0 go test -c -o "$W/libvirt.test" ./internal/libvirt) || { echo "FAIL: building the libvirt client tests"; exit 1; }
  fi
  export CROSSTALK CACHE
  unshare -m --propagation private "$0" --inner &
  inner=$!
  # Interrupted (Ctrl-C, a test timeout): the inner part cleans up and exits.
  trap 'kill -TERM "$inner" 2>/dev/null' INT TERM
  rc=0
  while kill -0 "$inner" 2>/dev/null; do
    wait "$inner" && rc=0 || rc=$?
  done
  exit "$rc"
fi

# ---- inner: in the private mount namespace ----
V="virsh -q -c qemu:///system"
PORT=$((19400 + $$ % 500))
API=127.0.0.1:$PORT
agent_pids=()
sampler_pid=""
fail() {
  echo "FAIL: $*"
  # What the agent saw, for the report.
  for f in "$W"/agent*.log; do [ -f "$f" ] && { echo "--- ${f##*/} (last 30 lines)"; tail -n 30 "$f"; }; done
  [ -f "$W/state/journal.jsonl" ] && { echo "--- journal (last 15)"; tail -n 15 "$W/state/journal.jsonl" | cut -c1-400; }
  [ -f "$W/timeline.txt" ] && { echo "--- timeline"; tail -n 40 "$W/timeline.txt"; }
  for f in "$W"/*.serial; do [ -f "$f" ] && { echo "--- ${f##*/} (last 5 lines)"; tail -n 5 "$f" | cut -c1-300; }; done
  exit 1
}
ok() { echo "CHECK ok: $*"; }

libvirtd_pid() { cat "$W/libvirtd.pid" 2>/dev/null || true; }
start_libvirtd() {
  # A daemon that fails to start says so here, not by ending the script
  # (set -e) with no word: right after a stop, the last one may still be
  # letting go of its pid file.
  local rc=0
  for _ in 1 2 3; do
    rc=0
    /usr/sbin/libvirtd -d --pid-file "$W/libvirtd.pid" || rc=$?
    [ "$rc" = 0 ] && break
    log "libvirtd -d exited $rc; starting it again in a second"
    sleep 1
  done
  for _ in $(seq 100); do [ -S /run/libvirt/libvirt-sock ] && $V version >/dev/null 2>&1 && return 0; sleep 0.1; done
  fail "libvirtd did not come up (libvirtd -d exited $rc; see $W/libvirtd.log)"
}
stop_libvirtd() {
  local p; p=$(libvirtd_pid)
  [ -n "$p" ] && kill -TERM "$p" 2>/dev/null || return 0
  for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$p" 2>/dev/null || true
  rm -f /run/libvirt/libvirt-sock
}

weight_file="" weight_orig="" agent_cg=""
inner_cleanup() {
  set +e
  [ -n "$weight_file" ] && [ -f "$weight_file" ] && echo "$weight_orig" > "$weight_file"
  [ -n "$sampler_pid" ] && kill "$sampler_pid" 2>/dev/null
  for p in "${agent_pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
  for p in "${agent_pids[@]}"; do
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null
  done
  if [ -z "$(libvirtd_pid)" ] || ! kill -0 "$(libvirtd_pid)" 2>/dev/null; then
    start_libvirtd >/dev/null 2>&1  # to destroy the guests the proper way
  fi
  for d in ct-libvirt-victim ct-libvirt-bystander ct-libvirt-polluter; do $V destroy "$d" >/dev/null 2>&1; done
  # A QEMU libvirt could not destroy: kill it by the PID libvirt recorded.
  for f in /run/libvirt/qemu/ct-libvirt-*.pid; do [ -f "$f" ] && kill -KILL "$(cat "$f")" 2>/dev/null; done
  stop_libvirtd
  [ -n "$agent_cg" ] && rmdir "$agent_cg" 2>/dev/null
}
trap inner_cleanup EXIT
trap 'echo "FAIL: interrupted"; exit 1' INT TERM
# set -e ends the script at a failing command with no word of its own: name it.
trap 'echo "FAIL: line $LINENO: \"$BASH_COMMAND\" failed"' ERR

for d in /run/libvirt /var/lib/libvirt /var/cache/libvirt /var/log/libvirt /etc/libvirt; do
  mount -t tmpfs -o mode=0755 ct-libvirt "$d"
done
mkdir -p /var/log/libvirt/qemu
printf 'user = "root"\ngroup = "root"\nstdio_handler = "file"\nsecurity_driver = "none"\n' > /etc/libvirt/qemu.conf
export LIBVIRT_LOG_OUTPUTS="3:file:$W/libvirtd.log"
start_libvirtd
log "libvirtd $($V version 2>/dev/null | awk '/Running hypervisor|Using library/{print $NF; exit}') up (private namespace)"

# Guests: busybox init that runs one crosstalk load, then powers off.
guest() { # name cpu load-args...
  local n=$1 cpu=$2; shift 2
  local r="$W/rootfs-$n"
  rm -rf "$r"
  mkdir -p "$r/bin" "$r/dev" "$r/proc" "$r/sys"
  cp /bin/busybox "$r/bin/"; cp "$CROSSTALK" "$r/bin/crosstalk"
  mknod -m 600 "$r/dev/console" c 5 1
  cat > "$r/init" <<EOI
#!/bin/busybox sh
/bin/busybox --install -s; mount -t proc proc /proc; mount -t sysfs sysfs /sys
echo "INIT: up at \$(cut -d' ' -f1 /proc/uptime)s"; /bin/crosstalk load $*; poweroff -f
EOI
  chmod +x "$r/init"
  (cd "$r" && find . | busybox cpio -o -H newc 2>/dev/null | gzip -1) > "$W/$n.initrd"
  cat > "$W/$n.xml" <<EOX
<domain type='qemu'><name>$n</name><memory unit='MiB'>160</memory>
  <vcpu placement='static'>1</vcpu>
  <cputune><vcpupin vcpu='0' cpuset='$cpu'/><emulatorpin cpuset='$cpu'/></cputune>
  <os><type arch='x86_64' machine='pc'>hvm</type><kernel>$CACHE/vmlinux</kernel><initrd>$W/$n.initrd</initrd>
      <cmdline>console=ttyS0 quiet</cmdline></os>
  <features><acpi/></features><cpu mode='maximum'/><on_poweroff>destroy</on_poweroff>
  <devices><serial type='file'><source path='$W/$n.serial'/><target port='0'/></serial><memballoon model='none'/></devices>
</domain>
EOX
  rm -f "$W/$n.serial"
  $V create "$W/$n.xml" >/dev/null
}
booted() { for _ in $(seq 600); do grep -q 'INIT: up' "$W/$1.serial" 2>/dev/null && return 0; sleep 0.1; done; fail "$1 did not boot"; }

# cgroup quota of a domain as "quota/period" (µs; -1 unlimited), from the
# hierarchy that holds the cpu controller (v1 cpu, else v2 cpu.max).
domquota() {
  local d
  for d in /sys/fs/cgroup/cpu/machine/qemu-*-"$1".libvirt-qemu /sys/fs/cgroup/cpu,cpuacct/machine/qemu-*-"$1".libvirt-qemu; do
    [ -f "$d/cpu.cfs_quota_us" ] && { echo "$(cat "$d/cpu.cfs_quota_us")/$(cat "$d/cpu.cfs_period_us")"; return; }
  done
  for d in /sys/fs/cgroup/machine/qemu-*-"$1".libvirt-qemu; do
    [ -f "$d/cpu.max" ] && { read -r q p < "$d/cpu.max"; [ "$q" = max ] && q=-1; echo "$q/$p"; return; }
  done
  echo "none"
}
schedq() { $V schedinfo "$1" --live 2>/dev/null | awk '/^global_quota/{q=$3} /^global_period/{p=$3} END{print q "/" p}'; }
# heavy gives a domain eight times its CPU weight (libvirt's cpu_shares).
heavy() {
  local s
  s=$($V schedinfo "$1" --live 2>/dev/null | awk '/^cpu_shares/{print $3}')
  [ -n "$s" ] && [ "$s" -gt 0 ] || fail "no cpu_shares for $1 in virsh schedinfo"
  $V schedinfo "$1" --live --set cpu_shares=$((s * 8)) >/dev/null || fail "could not set $1's cpu_shares"
}
api() {
  exec 3<>"/dev/tcp/127.0.0.1/$PORT" || return 1
  printf 'GET /api/state HTTP/1.0\r\nHost: localhost\r\n\r\n' >&3
  cat <&3
  exec 3>&-
}
# (No "| grep -q" with pipefail: an early exit of the reader can fail the pipe.)
journal_has() {
  awk -v k="\"kind\":\"$1\"" -v n="\"name\":\"$2\"" 'index($0, k) && index($0, n) { f = 1 } END { exit !f }' "$W/state/journal.jsonl" 2>/dev/null
}
waitfor() { # seconds description command...
  local t=$1 what=$2; shift 2
  for _ in $(seq $((t * 10))); do "$@" && return 0; sleep 0.1; done
  fail "timed out after ${t}s waiting for $what"
}
# The agent as shipped, sampling faster, with the canary probes' thresholds
# out of reach. Measured here: under TCG a guest cannot touch the memory bus
# or the L3 (QEMU runs its split locks as ordinary host code), while this
# 2-vCPU dev machine's probes read 2-15x spikes all day from the physical
# host's other tenants and from the hypervisor descheduling our own vCPUs;
# with the default thresholds the probe path proves whichever guest it
# tests by coincidence every minute or so. The e2e is about libvirt and
# the CPU-wait signal, which keeps its thresholds; the probes are the lab's.
# CPU wait proves and throttles only where cpu_wait.prove says so: here,
# a host whose guests' CPU weights are not meant to divide a shared CPU.
cat > "$W/agent.yaml" <<EOF
interval: 250ms
listen: $API
state_dir: $W/state
judge:
  ratio: 50
  strong: 100
  llc_ratio: 50
  llc_strong: 100
cpu_wait:
  prove: true
EOF
start_agent() { # log-file
  "$CROSSTALK" run --config "$W/agent.yaml" --log-level info > "$1" 2>&1 &
  agent_pids+=($!)
  AGENT=$!
  disown "$AGENT" # no job-control notice when one is killed on purpose
  [ -n "$agent_cg" ] && echo "$AGENT" > "$agent_cg/cgroup.procs"
}
stop_agent() { # pid signal
  kill "-$2" "$1" 2>/dev/null || true
  for _ in $(seq 100); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done
  fail "agent $1 did not exit after SIG$2 in 10 s: $(procstate "$1")"
}
# Where a process that outlives a signal sits: its state, and each thread's
# state, kernel wait channel and kernel stack (a zombie its parent has not
# reaped, or a thread in uninterruptible sleep in a cgroup or libvirt write).
procstate() {
  local p=$1 t
  echo "state $(awk '/^State:/{print $2, $3}' "/proc/$p/status" 2>/dev/null), ppid $(awk '/^PPid:/{print $2}' "/proc/$p/status" 2>/dev/null)"
  for t in /proc/"$p"/task/*; do
    [ -d "$t" ] || continue
    echo "  thread ${t##*/}: $(awk '/^State:/{print $2, $3}' "$t/status" 2>/dev/null) wchan $(cat "$t/wchan" 2>/dev/null) $(tr '\n' ' ' < "$t/stack" 2>/dev/null | cut -c1-300)"
  done
}
# The victim's and the polluter's vCPU time and wait per second
# (domstats vcpu.0.time and vcpu.0.delay), for the record.
vcpu0() { $V domstats --vcpu "$1" 2>/dev/null | awk -F= '/vcpu.0.time=/{t=$2} /vcpu.0.delay=/{d=$2} END{print t+0, d+0}'; }
sampler() {
  local t0 t1 v0 vd0 p0 pd0 v1 vd1 p1 pd1
  t0=$(date +%s.%N); read -r v0 vd0 < <(vcpu0 ct-libvirt-victim); read -r p0 pd0 < <(vcpu0 ct-libvirt-polluter)
  while sleep 1; do
    t1=$(date +%s.%N); read -r v1 vd1 < <(vcpu0 ct-libvirt-victim); read -r p1 pd1 < <(vcpu0 ct-libvirt-polluter)
    [ "$v1" = 0 ] && continue # libvirtd away: the next line covers the gap
    awk -v t0="$t0" -v t1="$t1" -v a="$v0 $vd0 $p0 $pd0" -v b="$v1 $vd1 $p1 $pd1" -v s="$T0" 'BEGIN{
      split(a, x, " "); split(b, y, " "); dt = t1 - t0
      for (i = 1; i <= 4; i++) { r[i] = (y[i] - x[i]) / 1e9 / dt; if (r[i] < 0) r[i] = 0 }
      printf "t=%5.1fs victim cpu %.2f wait %.2f | polluter cpu %.2f wait %.2f\n", t1 - s, r[1], r[2], r[3], r[4] }'
    t0=$t1 v0=$v1 vd0=$vd1 p0=$p1 pd0=$pd1
  done
}
api_names_victim() { api 2>/dev/null | grep -q '"name":"ct-libvirt-victim"'; }
throttles_at_least() { [ "$(grep -c '"kind":"throttle"' "$W/state/journal.jsonl" 2>/dev/null)" -ge "$1" ]; }
# A slow libvirtd (a call past its deadline) also drops and remakes the
# connection, so a reconnection counts only past the lines logged before the
# restart.
reconnected() { [ "$(grep -c 'connected to libvirt' "$W/agent1.log")" -gt "$connects_before" ]; }
unthrottled() { [ "$(domquota "$1")" = "-1/100000" ]; }
resynced() { grep -q 'live definition of the VM agrees' "$W/agent3.log"; }

T0=$(date +%s)
log "booting ct-libvirt-victim (CPU 1) and ct-libvirt-bystander (CPU 0)"
guest ct-libvirt-victim 1 chase --size 2MiB --duration 300s --interval 10s
guest ct-libvirt-bystander 0 cpu --rate 2e7 --duration 300s --interval 10s
booted ct-libvirt-victim
booted ct-libvirt-bystander
mkdir -p "$W/state"
if [ -x "$W/libvirt.test" ]; then
  CT_LIBVIRT_SOCKET=/run/libvirt/libvirt-sock CT_LIBVIRT_DOMAIN=ct-libvirt-bystander "$W/libvirt.test" -test.run '^TestLive$' -test.v > "$W/live.log" 2>&1 ||
    { cat "$W/live.log"; fail "the libvirt client's live test failed"; }
  grep -q -- '--- PASS: TestLive' "$W/live.log" || { cat "$W/live.log"; fail "the libvirt client's live test did not run"; }
  ok "libvirt client live: list, XML, vCPU threads and cgroups, domstats, schedinfo round trip, vcpupin/emulatorpin ($(grep -m1 -o 'vcpu 0: [^,]*, affinity [^,]*, cgroup [^ ]*' "$W/live.log"))"
fi
# The guests share this host with whatever else runs on it (on a dev box,
# other jobs at a load of 5-8). For the run, libvirt's partition and the
# agent (in a cgroup of its own) get a CPU weight of four ordinary tasks
# each, so CPU 1 is shared mostly between the victim and the polluter and
# the polluter's effect is what the victim feels, while the agent keeps its
# share (a probe thread starved on a busy CPU stalls the Go runtime's
# stop-the-world, and with it the whole agent). Restored on exit.
cpu_root=""
for d in /sys/fs/cgroup/cpu /sys/fs/cgroup/cpu,cpuacct; do [ -f "$d/cpu.shares" ] && { cpu_root=$d; break; }; done
if [ -z "$cpu_root" ] && grep -qw cpu /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null; then cpu_root=/sys/fs/cgroup; fi
setweight() { # dir: four ordinary tasks' worth
  if [ -f "$1/cpu.shares" ]; then echo 4096 > "$1/cpu.shares"; else echo 400 > "$1/cpu.weight"; fi
}
if [ -n "$cpu_root" ] && [ -d "$cpu_root/machine" ]; then
  for f in "$cpu_root/machine/cpu.shares" "$cpu_root/machine/cpu.weight"; do
    [ -f "$f" ] && { weight_file=$f; weight_orig=$(cat "$f"); break; }
  done
  setweight "$cpu_root/machine"
  agent_cg=$cpu_root/ct-libvirt-agent
  mkdir -p "$agent_cg" && setweight "$agent_cg"
fi

# ---- 1. the agent finds the domains, proves and throttles the polluter through libvirt ----
start_agent "$W/agent1.log"; A1=$AGENT
waitfor 15 "the agent's state API naming the guests" api_names_victim
state=$(api)
for d in ct-libvirt-victim ct-libvirt-bystander; do
  uuid=$($V domuuid "$d")
  echo "$state" | grep -q "\"name\":\"$d\",\"uuid\":\"$uuid\"" || fail "agent state lacks $d with UUID $uuid"
done
ok "agent discovered the domains by name and UUID (from libvirt)"
echo "$state" | grep -o '"name":"ct-libvirt-victim"[^}]*"cpus":"[0-9,-]*"' | grep -q '"cpus":"1"' || fail "victim's CPUs are not its pinned CPU 1: $(echo "$state" | grep -o '"name":"ct-libvirt-victim"[^}]*' | cut -c1-300)"
ok "the victim's CPUs are its vcpupin/emulatorpin (1), not its cgroup's"
sampler > "$W/timeline.txt" 2>/dev/null &
sampler_pid=$!
sleep 5 # the victim's quiet waits
log "starting ct-libvirt-polluter on the victim's CPU"
TP=$(date +%s.%N)
guest ct-libvirt-polluter 1 cpu --duration 300s --interval 10s
heavy ct-libvirt-polluter
waitfor 60 "the agent to throttle ct-libvirt-polluter" journal_has throttle ct-libvirt-polluter
TT=$(date +%s.%N)
TPr=$(awk "BEGIN{print $TP - $T0}") TTr=$(awk "BEGIN{print $TT - $T0}")
log "throttled $(awk "BEGIN{printf \"%.1f\", $TT - $TP}")s after the polluter was started (its boot included)"
for d in ct-libvirt-victim ct-libvirt-bystander; do
  journal_has throttle "$d" && fail "the agent throttled $d"
done
# The controller moves the duty step every few intervals: read libvirt's
# view, its live XML and the cgroup until they agree on one value.
agree() {
  q=$(schedq ct-libvirt-polluter)
  qq=${q%/*} qp=${q#*/}
  [ "$(domquota ct-libvirt-polluter)" = "$q" ] && $V dumpxml ct-libvirt-polluter | grep -q "<global_quota>$qq</global_quota>"
}
waitfor 5 "libvirt's schedinfo, live XML and the domain cgroup to agree" agree
case "$q" in -1/*|/*|"") fail "virsh schedinfo shows no global quota on the polluter: $q";; esac
[ "$qq" -gt 0 ] && [ $((qq * 4)) -le "$qp" ] || fail "polluter global_quota $q is not a throttle"
for d in ct-libvirt-victim ct-libvirt-bystander; do
  [ "$(schedq $d)" = "-1/100000" ] || fail "$d has global quota $(schedq $d)"
done
ok "polluter throttled through libvirt: schedinfo global_quota/period $q, in its live XML and cgroup; victim and bystander untouched"
grep '"kind":"proof"' "$W/state/journal.jsonl" | grep -o '"name":"[^"]*","detail":"[^"]*' | awk 'NR <= 5' | sed 's/^/e2e:   proof: /'
sleep 4
TR=$(awk "BEGIN{print $(date +%s.%N) - $T0}")

# ---- 2. libvirtd restarts while the polluter is throttled ----
log "restarting libvirtd while the polluter is throttled"
connects_before=$(grep -c 'connected to libvirt' "$W/agent1.log" || true)
losses_before=$(grep -c 'libvirt connection lost' "$W/agent1.log" || true)
stop_libvirtd
sleep 1
start_libvirtd
waitfor 20 "the agent to reconnect" reconnected
[ "$(grep -c 'libvirt connection lost' "$W/agent1.log")" -gt "$losses_before" ] || fail "the agent did not log the lost connection"
q2=$(schedq ct-libvirt-polluter)
case "$q2" in -1/*) fail "throttle gone after the libvirtd restart";; esac
kill -0 "$A1" || fail "the agent died when libvirtd restarted"
ok "libvirtd restart: the agent logged it, reconnected, the throttle held ($q2)"
sleep 2

# ---- 3. SIGTERM: restored through libvirt ----
stop_agent "$A1" TERM
[ "$(schedq ct-libvirt-polluter)" = "-1/100000" ] || fail "after SIGTERM the polluter still has $(schedq ct-libvirt-polluter)"
[ "$(domquota ct-libvirt-polluter)" = "-1/100000" ] || fail "after SIGTERM the polluter's cgroup holds $(domquota ct-libvirt-polluter)"
grep -q '"libvirt_sched"' "$W/state/state.json" && fail "state file still holds libvirt records after a clean stop"
ok "SIGTERM: the polluter restored through libvirt (schedinfo -1/100000), state file clean"
# Every proof the agent journalled gives its verdict again from its readings.
"$CROSSTALK" explain --verify --config "$W/agent.yaml" --journal "$W/state/journal.jsonl" > "$W/verify.txt" 2>&1 ||
  fail "the journal's proofs do not give their verdicts again: $(grep -m3 -e 'NOT REPRODUCED' -e 'verified' -e 'rror' "$W/verify.txt" | cut -c1-300)"
ok "explain --verify: $(tail -n 1 "$W/verify.txt")"

# ---- 4. must-hold: kill -9 while throttled, libvirtd down, restart without libvirt ----
log "second round: polluter restarted after the victim's quiet waits are learned again"
$V destroy ct-libvirt-polluter >/dev/null
start_agent "$W/agent2.log"; A2=$AGENT
sleep 5
guest ct-libvirt-polluter 1 cpu --duration 300s --interval 10s
heavy ct-libvirt-polluter
waitfor 60 "the second agent to throttle the polluter" throttles_at_least 2
# Read what the agent last wrote only once it is dead: alive, it may still
# tighten the throttle (onto the deep floor, 32 ms) between a read and the kill.
stop_agent "$A2" KILL
# libvirtd finishes a request the agent sent just before it died (period and
# quota are two cgroup writes): give it a moment, then read one agreed value.
sleep 1
waitfor 5 "libvirt and the domain cgroup to agree after the kill" agree
q3=$(schedq ct-libvirt-polluter)
case "$q3" in -1/*|/*|"") fail "no throttle on the polluter when the agent was killed: $q3";; esac
stop_libvirtd
[ "$(domquota ct-libvirt-polluter)" = "$q3" ] || fail "throttle $q3 not in force after kill -9 (cgroup $(domquota ct-libvirt-polluter))"
log "agent killed -9 with the polluter at $q3, libvirtd stopped; starting a third agent"
start_agent "$W/agent3.log"; A3=$AGENT
waitfor 20 "the third agent to lift the throttle through the cgroup files" unthrottled ct-libvirt-polluter
grep -q 'LIBVIRT UNREACHABLE' "$W/agent3.log" || fail "the fallback was not logged loudly"
grep -q '"path": "cgroup-fallback"' "$W/state/state.json" || fail "the fallback was not recorded for a resync"
ok "libvirtd down at start after kill -9: throttle lifted through the cgroup files, logged loudly, resync pending"
start_libvirtd
waitfor 20 "the resync once libvirtd is back" resynced
[ "$(schedq ct-libvirt-polluter)" = "-1/100000" ] || fail "libvirt still shows $(schedq ct-libvirt-polluter) after the resync"
$V dumpxml ct-libvirt-polluter | grep -q "<global_quota>$qq</global_quota>" && fail "libvirt's live XML still carries the throttle"
grep -q '"libvirt_sched"' "$W/state/state.json" && fail "state file still holds libvirt records after the resync"
ok "libvirtd back: libvirt resynced (schedinfo -1/100000), state file clean"
# This agent learned the victim's waits with the polluter already running,
# so it leaves them be: a few seconds of plain contention, for the record.
TS1=$(awk "BEGIN{print $(date +%s.%N) - $T0}")
sleep 5
TS2=$(awk "BEGIN{print $(date +%s.%N) - $T0}")

# ---- 5. a domain vanishing under a running agent ----
$V destroy ct-libvirt-polluter >/dev/null
sleep 2
kill -0 "$A3" || fail "the agent died when a domain vanished"
grep -q 'domain stopped' "$W/agent3.log" || fail "the agent did not log the domain's lifecycle event"
stop_agent "$A3" TERM
ok "a destroyed domain: lifecycle event logged, agent still running, clean stop"

# ---- 6. crosstalk plan --from-libvirt --apply: live pinning through libvirt ----
# The victim is pinned to CPU 1 and the bystander to CPU 0; per-node lets both
# float over the node's CPUs: every vCPU (and emulator) pin must change live.
"$CROSSTALK" plan --from-libvirt --policy per-node --apply > "$W/plan.txt" 2>&1 || { cat "$W/plan.txt"; fail "crosstalk plan --from-libvirt --apply failed"; }
grep -q "APPLIED LIVE" "$W/plan.txt" || { cat "$W/plan.txt"; fail "plan --apply reported nothing applied"; }
for d in ct-libvirt-victim ct-libvirt-bystander; do
  aff=$($V vcpupin "$d" --live | awk '$1 == "0" {print $NF}')
  [ "$aff" = "0-1" ] || { cat "$W/plan.txt"; fail "$d vCPU 0 pinned to '$aff' after plan --apply, want 0-1"; }
done
ok "plan --from-libvirt --apply re-pinned both running domains live ($(grep -c ' -> ' "$W/plan.txt") changes)"

for d in ct-libvirt-victim ct-libvirt-bystander; do
  journal_has throttle "$d" && fail "the agent throttled $d"
done
ok "over the whole run only ct-libvirt-polluter was throttled"

kill "$sampler_pid" 2>/dev/null || true; sampler_pid=""
log "victim and polluter per second (domstats vcpu.0.time and vcpu.0.delay):"
sed 's/^/e2e:   /' "$W/timeline.txt"
# Means per phase: alone; from the polluter's start to its throttle (its
# boot included); throttled (until the libvirtd restart); and free and
# unthrottled later (the third agent leaves it be).
awk -v a="$TPr" -v b="$TTr" -v c="$TR" -v d="$TS1" -v e="$TS2" '
  { sub(/^t= */, ""); t = $1 + 0 }
  { ph = t <= a ? 1 : (t <= b ? 2 : (t <= c ? 3 : (t > d && t <= e ? 4 : 0))) }
  ph { n[ph]++; vc[ph] += $4; vw[ph] += $6; pc[ph] += $10; pw[ph] += $12 }
  END { split("alone,until the throttle,throttled,polluter free", name, ",")
        for (i = 1; i <= 4; i++) if (n[i]) printf "e2e: %-18s victim vCPU %.2f CPU, waits %.2f s/s; polluter vCPU %.2f CPU (%d samples)\n", name[i], vc[i]/n[i], vw[i]/n[i], pc[i]/n[i], n[i] }' "$W/timeline.txt"
grep -m1 -h '"kind":"detection"' "$W/state/journal.jsonl" | grep -o '"detail":"[^"]*' | sed 's/^"detail":"/e2e: first detection: /'
echo "PASS: libvirt e2e in $(( $(date +%s) - T0 ))s"
