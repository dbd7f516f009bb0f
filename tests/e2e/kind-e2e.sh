#!/usr/bin/env bash
# End-to-end test on a real Kubernetes cluster made with kind (needs Docker, kind, kubectl,
# helm). Not run in CI here (no Docker engine); run it on a workstation:
#
#   tests/e2e/kind-e2e.sh            # create cluster, test, delete cluster
#   KEEP_CLUSTER=1 tests/e2e/kind-e2e.sh   # leave the cluster up for a look around
#
# Steps: create a kind cluster, build the operator image and load it into the cluster,
# install the Helm chart, apply manifests/examples/, wait until every resource is Ready or
# Succeeded, print `kubectl get kraftsman`, tear down.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CLUSTER="${CLUSTER:-kraftsman-e2e}"
IMAGE="${IMAGE:-ghcr.io/kraftsman/kraftsman:e2e}"
NAMESPACE="${NAMESPACE:-kraftsman-system}"
EXAMPLES_NS="${EXAMPLES_NS:-kraftsman-demo}"
TIMEOUT="${TIMEOUT:-600s}"
CHART="$ROOT/charts/kraftsman"
EXAMPLES="$ROOT/manifests/examples"
DOCKERFILE="$ROOT/Dockerfile"

for tool in docker kind kubectl helm; do
  command -v "$tool" >/dev/null || { echo "e2e: $tool is required" >&2; exit 2; }
done

cleanup() {
  status=$?
  if [[ $status -ne 0 ]]; then
    echo "--- operator logs" >&2
    kubectl -n "$NAMESPACE" logs deploy/kraftsman --tail=200 >&2 || true
    kubectl get kraftsman -A -o yaml >&2 || true
  fi
  if [[ -z "${KEEP_CLUSTER:-}" ]]; then
    kind delete cluster --name "$CLUSTER" || true
  fi
  exit $status
}
trap cleanup EXIT

echo "--- kind cluster $CLUSTER"
kind create cluster --name "$CLUSTER" --wait 120s

echo "--- image $IMAGE"
docker build -t "$IMAGE" -f "$DOCKERFILE" "$ROOT"
kind load docker-image "$IMAGE" --name "$CLUSTER"

echo "--- chart"
helm upgrade --install kraftsman "$CHART" --namespace "$NAMESPACE" --create-namespace \
  --set image.repository="${IMAGE%:*}" --set image.tag="${IMAGE##*:}" \
  --set image.pullPolicy=Never --set state.type=persistentVolumeClaim --wait --timeout 180s
kubectl label namespace "$NAMESPACE" pod-security.kubernetes.io/enforce=restricted --overwrite
kubectl -n "$NAMESPACE" rollout status deploy/kraftsman --timeout 180s

echo "--- examples, in order (like Argo CD sync waves: each file Ready/Succeeded first)"
kubectl create namespace "$EXAMPLES_NS" --dry-run=client -o yaml | kubectl apply -f -
condition_for() {  # kind -> the condition that means done
  case "$1" in
    KafkaCluster|KafkaQuorum) echo Ready ;;
    KafkaRebalance) echo ProposalReady ;;  # the example waits for approval
    *) echo Succeeded ;;
  esac
}
for file in "$EXAMPLES"/*.yaml; do
  kubectl -n "$EXAMPLES_NS" apply -f "$file"
  for ref in $(kubectl -n "$EXAMPLES_NS" get -f "$file" -o name); do
    kind="$(kubectl -n "$EXAMPLES_NS" get "$ref" -o jsonpath='{.kind}')"
    kubectl -n "$EXAMPLES_NS" wait "$ref" --for=condition="$(condition_for "$kind")" \
      --timeout="$TIMEOUT"
  done
done

echo "--- kubectl get kraftsman"
kubectl get kraftsman -n "$EXAMPLES_NS" -o wide

echo "--- cancel by deletion: the finalizer releases the resource"
kubectl -n "$EXAMPLES_NS" delete partitionreassignments.kraftsman.io --all --timeout 120s
echo "e2e: OK"
