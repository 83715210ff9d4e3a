#!/bin/bash
# Two "hosts" on this machine: network namespaces joined by a veth pair, addresses only inside them.
# mpirun (in namespace A) starts its daemon in namespace B through a plm_rsh_agent wrapper that runs
# `ip netns exec B ...` instead of ssh, and the ranks talk TCP over the veth (btl tcp,self: no shared
# memory between ranks, even on one "host"). Four ranks, two per host, TP2 x DP2: each TP group on one
# host, DP across the link. The run must reproduce the single-rank loss curve and weights.
# Bounded in time (timeout), cleaned up on every exit path; exit 77 (ctest skip) when namespaces
# cannot be made here.
#   netns_two_hosts.sh MPIRUN PARITY_BINARY
set -u
MPIRUN=$1
BIN=$2
TAG=$$
NS_A=herd_a_$TAG
NS_B=herd_b_$TAG
VA=hva$TAG
VB=hvb$TAG
NET=10.$((TAG % 200 + 20)).77
WORK=$(mktemp -d /tmp/herd_netns_XXXXXX)

cleanup() {
  ip netns del "$NS_A" 2>/dev/null
  ip netns del "$NS_B" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT

if ! ip netns add "$NS_A" 2>"$WORK/err"; then
  echo "SKIP: cannot create a network namespace here ($(cat "$WORK/err")); run as root with CAP_SYS_ADMIN"
  exit 77
fi
ip netns add "$NS_B" || exit 1
ip link add "$VA" type veth peer name "$VB" || exit 1
ip link set "$VA" netns "$NS_A" && ip link set "$VB" netns "$NS_B" || exit 1
ip -n "$NS_A" addr add "$NET.1/24" dev "$VA" && ip -n "$NS_B" addr add "$NET.2/24" dev "$VB" || exit 1
for ns in "$NS_A" "$NS_B"; do ip -n "$ns" link set lo up; done
ip -n "$NS_A" link set "$VA" up && ip -n "$NS_B" link set "$VB" up || exit 1

# The "ssh" of this cluster: the first non-option argument is the host, the rest is the command.
cat >"$WORK/agent.sh" <<AGENT
#!/bin/bash
while [ "\${1#-}" != "\$1" ]; do shift; done
host=\$1; shift
case "\$host" in
  $NET.1) ns=$NS_A ;;
  $NET.2) ns=$NS_B ;;
  *) echo "agent: unknown host \$host" >&2; exit 1 ;;
esac
echo "\$host -> \$ns" >>"$WORK/agent.log"
exec ip netns exec "\$ns" /bin/sh -c "\$*"
AGENT
chmod +x "$WORK/agent.sh"
printf '%s slots=2\n%s slots=2\n' "$NET.1" "$NET.2" >"$WORK/hosts"

echo "namespaces $NS_A ($NET.1, $VA) and $NS_B ($NET.2, $VB)"
timeout -k 10 240 ip netns exec "$NS_A" "$MPIRUN" --allow-run-as-root --oversubscribe --bind-to none \
  -np 4 --hostfile "$WORK/hosts" \
  --mca plm_rsh_agent "$WORK/agent.sh" --mca plm_rsh_no_tree_spawn 1 \
  --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include "$NET.0/24" --mca oob_tcp_if_include "$NET.0/24" \
  -x PATH \
  "$BIN" --tp 2 --dp 2 2>&1 | tee "$WORK/out"
rc=${PIPESTATUS[0]}
grep -q "PARITY OK" "$WORK/out" || { echo "two-host run failed (exit $rc)"; exit 1; }
# The daemon of the second host must have been started inside its namespace by the agent.
grep -q "$NET.2 -> $NS_B" "$WORK/agent.log" 2>/dev/null || { echo "no daemon was started in $NS_B"; exit 1; }
echo "agent calls: $(tr '\n' ';' <"$WORK/agent.log")"
exit "$rc"
