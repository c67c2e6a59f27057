#!/usr/bin/env bash
# Builds the sandbox's control-plane binaries (and helm, which the chart tests drive) from Go
# modules into a cache outside the repository, one folder per component and version, and skips
# every component whose binary is already there.
# Usage: build-binaries.sh CACHE_DIR [COMPONENT...]   (components: etcd kwok kubernetes helm,
# the default, and kubelet, only on request)
# Why throwaway modules: k8s.io/kubernetes and etcd's server module carry `replace` directives, so
# `go install pkg@version` is refused; a tiny main module that pins the published tags builds them.
set -euo pipefail

CACHE=${1:?usage: build-binaries.sh CACHE_DIR}
K8S_VERSION=${GPUFLEET_K8S_VERSION:-1.36.3}
ETCD_VERSION=${GPUFLEET_ETCD_VERSION:-3.6.16}
KWOK_VERSION=${GPUFLEET_KWOK_VERSION:-0.8.0}
HELM_VERSION=${GPUFLEET_HELM_VERSION:-4.3.2}

export CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS=-buildvcs=false

step() { printf '[build] %s\n' "$*"; }

build_etcd() {
  local out="$CACHE/etcd-v$ETCD_VERSION"
  [ -x "$out/etcd" ] && { step "etcd v$ETCD_VERSION cached"; return; }
  step "etcd v$ETCD_VERSION: fetching modules"
  local mod="$CACHE/src/etcd-v$ETCD_VERSION"
  rm -rf "$mod" && mkdir -p "$mod" "$out.tmp"
  cat >"$mod/go.mod" <<MOD
module local.test/etcdbin

go 1.26.0

tool go.etcd.io/etcd/server/v3

require go.etcd.io/etcd/server/v3 v$ETCD_VERSION
MOD
  (cd "$mod" && go mod tidy)
  step "etcd v$ETCD_VERSION: compiling"
  (cd "$mod" && go build -trimpath -ldflags='-s -w' -o "$out.tmp/etcd" go.etcd.io/etcd/server/v3)
  rm -rf "$out" && mv "$out.tmp" "$out"
  step "etcd v$ETCD_VERSION: done"
}

build_kwok() {
  local out="$CACHE/kwok-v$KWOK_VERSION"
  [ -x "$out/kwok" ] && [ -d "$out/kustomize" ] && { step "kwok v$KWOK_VERSION cached"; return; }
  step "kwok v$KWOK_VERSION: fetching and compiling"
  mkdir -p "$out.tmp"
  GOBIN="$out.tmp" go install -trimpath -ldflags='-s -w' "sigs.k8s.io/kwok/cmd/kwok@v$KWOK_VERSION"
  # kwok's stage definitions ship in its module; keep a copy beside the binary.
  local src
  src="$(go env GOMODCACHE)/sigs.k8s.io/kwok@v$KWOK_VERSION/kustomize"
  cp -r "$src" "$out.tmp/kustomize" && chmod -R u+w "$out.tmp/kustomize"
  rm -rf "$out" && mv "$out.tmp" "$out"
  step "kwok v$KWOK_VERSION: done"
}

# A throwaway main module requiring k8s.io/kubernetes with every staging module mapped to its
# published v0.<minor>.<patch> tag (read from k/k's own go.mod), the given commands as tools.
k8s_module() {
  local mod=$1; shift
  rm -rf "$mod" && mkdir -p "$mod"
  {
    printf 'module local.test/k8sbins\n\ngo 1.26.0\n\ngodebug default=go1.26\n\ntool (\n'
    printf '\tk8s.io/kubernetes/cmd/%s\n' "$@"
    printf ')\n\nrequire k8s.io/kubernetes v%s\n' "$K8S_VERSION"
  } >"$mod/go.mod"
  local gomod
  gomod=$(cd "$mod" && go mod download -json "k8s.io/kubernetes@v$K8S_VERSION" \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')
  local staging
  staging=$(sed -n 's|^[[:space:]]*\(k8s.io/[^ ]*\) => \./staging/src/k8s.io/.*|\1|p' "$gomod")
  for m in $staging; do
    (cd "$mod" && go mod edit -replace="$m=$m@v0.${K8S_VERSION#1.}")
  done
  (cd "$mod" && go mod tidy)
}

# go build of k8s commands from a k8s_module, with the version stamp hack/lib/version.sh sets.
k8s_build() {
  local mod=$1 out=$2; shift 2
  local minor=${K8S_VERSION#1.}; minor=${minor%%.*}
  local date ld p
  date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  ld="-s -w"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld="$ld -X '$p.gitVersion=v$K8S_VERSION' -X '$p.gitMajor=1' -X '$p.gitMinor=$minor'"
    ld="$ld -X '$p.gitTreeState=clean' -X '$p.buildDate=$date'"
  done
  local pkgs=()
  for p in "$@"; do pkgs+=("k8s.io/kubernetes/cmd/$p"); done
  (cd "$mod" && go build -p 2 -trimpath -tags=selinux,notest,grpcnotrace -ldflags="$ld" \
    -o "$out/" "${pkgs[@]}")
}

build_k8s() {
  local out="$CACHE/kubernetes-v$K8S_VERSION"
  [ -x "$out/kube-apiserver" ] && [ -x "$out/kube-controller-manager" ] && [ -x "$out/kube-scheduler" ] \
    && { step "kubernetes v$K8S_VERSION cached"; return; }
  local mod="$CACHE/src/kubernetes-v$K8S_VERSION"
  step "kubernetes v$K8S_VERSION: fetching modules"
  k8s_module "$mod" kube-apiserver kube-controller-manager kube-scheduler
  step "kubernetes v$K8S_VERSION: compiling kube-apiserver, kube-controller-manager, kube-scheduler (10-25 min cold)"
  mkdir -p "$out.tmp"
  k8s_build "$mod" "$out.tmp" kube-apiserver kube-controller-manager kube-scheduler
  rm -rf "$out" && mv "$out.tmp" "$out"
  step "kubernetes v$K8S_VERSION: done"
}

# Only on request (bench/kubelet_device_plugin.py): the sandbox itself runs no kubelet.
build_kubelet() {
  local out="$CACHE/kubelet-v$K8S_VERSION"
  [ -x "$out/kubelet" ] && { step "kubelet v$K8S_VERSION cached"; return; }
  local mod="$CACHE/src/kubelet-v$K8S_VERSION"
  step "kubelet v$K8S_VERSION: fetching modules"
  k8s_module "$mod" kubelet
  step "kubelet v$K8S_VERSION: compiling (3-6 min once the control plane is built)"
  mkdir -p "$out.tmp"
  k8s_build "$mod" "$out.tmp" kubelet
  rm -rf "$out" && mv "$out.tmp" "$out"
  step "kubelet v$K8S_VERSION: done"
}

build_helm() {
  local out="$CACHE/helm-v$HELM_VERSION"
  [ -x "$out/helm" ] && { step "helm v$HELM_VERSION cached"; return; }
  step "helm v$HELM_VERSION: fetching and compiling (4-10 min cold on 2 cores)"
  mkdir -p "$out.tmp"
  # helm's go.mod has no replace directives, so `go install` builds the tag as published. The
  # version stamp is what helm's own Makefile sets for a release build.
  local major=${HELM_VERSION%%.*}
  GOBIN="$out.tmp" go install -trimpath \
    -ldflags="-s -w -X helm.sh/helm/v$major/internal/version.version=v$HELM_VERSION -X helm.sh/helm/v$major/internal/version.gitTreeState=clean" \
    "helm.sh/helm/v$major/cmd/helm@v$HELM_VERSION"
  rm -rf "$out" && mv "$out.tmp" "$out"
  step "helm v$HELM_VERSION: done"
}

mkdir -p "$CACHE"
shift
[ $# -gt 0 ] || set -- etcd kwok kubernetes helm
for c in "$@"; do
  case "$c" in
    etcd) build_etcd ;;
    kwok) build_kwok ;;
    kubernetes) build_k8s ;;
    helm) build_helm ;;
    kubelet) build_kubelet ;;
    *) echo "unknown component: $c" >&2; exit 2 ;;
  esac
done
step "all binaries ready in $CACHE"
