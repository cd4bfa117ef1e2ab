#!/usr/bin/env bash
# Checks deploy/ without a cluster or a container engine:
#   1. yamllint passes on every YAML file under deploy/ (deploy/.yamllint);
#   2. every kustomization (overlays/cpu, overlays/gpu, autoscaling/hpa) renders with
#      `kubectl kustomize`, and every rendered object validates against the Kubernetes
#      object schemas (npm kubernetes-models, @kubernetes-models/keda and
#      /prometheus-operator), plus the structural checks of deploy_check.mjs (probes,
#      drain, service links off, GPU request, selectors, alerts = PrometheusRule, every
#      KVSERVE_* setting accepted by `kvserve config --dump`);
#   3. compose.yml is consistent (services, mounted files, settings accepted by kvserve);
#   4. the Dockerfile's build steps are the README's;
#   5. promtool accepts the compose Prometheus configuration.
# Usage: deploy_check.sh KVSERVE_BINARY
set -u
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
bin="$1"
fail=0
for tool in yamllint kubectl node npm promtool; do
  command -v "$tool" >/dev/null || { echo "FAIL: '$tool' is required (tools/setup.sh test installs it)"; exit 1; }
done
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

if ! yamllint -c "$root/deploy/.yamllint" -f parsable "$root/deploy"; then
  echo "FAIL yamllint"; fail=1
fi

for k in overlays/cpu overlays/gpu autoscaling/hpa; do
  out="$tmp/$(echo "$k" | tr / _).yaml"
  if ! kubectl kustomize "$root/deploy/k8s/$k" >"$out" 2>"$tmp/kustomize.err"; then
    echo "FAIL kustomize $k:"; cat "$tmp/kustomize.err"; fail=1
  fi
done

if ! npm install --prefix "$tmp/npm" --no-audit --no-fund --loglevel=error \
      kubernetes-models@4.5.1 @kubernetes-models/keda@0.4.2 \
      @kubernetes-models/prometheus-operator@6.0.0 yaml@2.9.1 >"$tmp/npm.log" 2>&1; then
  echo "FAIL: npm install of the schema packages failed (is the npm registry reachable?)"
  cat "$tmp/npm.log"; exit 1
fi
if ! node "$here/deploy_check.mjs" --modules "$tmp/npm/node_modules" --root "$root" --kvserve "$bin" \
      --rendered "cpu=$tmp/overlays_cpu.yaml" --rendered "gpu=$tmp/overlays_gpu.yaml" \
      --rendered "hpa=$tmp/autoscaling_hpa.yaml"; then
  fail=1
fi

cp "$root/deploy/docker/prometheus.yml" "$root/deploy/prometheus/alerts.yml" "$tmp/"
if ! promtool check config "$tmp/prometheus.yml" >"$tmp/promtool.log" 2>&1; then
  echo "FAIL promtool check config deploy/docker/prometheus.yml:"; cat "$tmp/promtool.log"; fail=1
fi

[ "$fail" = 0 ] && echo "PASS deploy_check"
exit "$fail"
