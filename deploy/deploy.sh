#!/usr/bin/env bash
# Builds berthd's image, gets it to a cluster's nodes and applies deploy/.
#
#   deploy/deploy.sh [--dry-run] [--tag TAG] COMMAND [ARG]
#
# Commands:
#   image               build the image ghcr.io/berth-scheduler/berthd:TAG
#   kind [CLUSTER]      build, load it into the kind cluster (default: kind),
#                       apply deploy/
#   minikube [PROFILE]  build, load it into minikube (default profile:
#                       minikube), apply deploy/
#   registry REGISTRY   build as REGISTRY/berthd:TAG, push it, apply deploy/
#                       with that image (REGISTRY as docker names it:
#                       registry.example.com/team, localhost:5000)
#   render [REGISTRY]   print the manifests that would be applied
#   apply [REGISTRY]    apply the manifests (the image already on the nodes
#                       or in REGISTRY)
#
# TAG defaults to berth's version (the workspace's Cargo.toml): never
# :latest, so that imagePullPolicy IfNotPresent keeps a loaded image and a
# new build gets a new tag. --dry-run prints the commands instead of running
# them. Run from anywhere; paths are the repository's.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
image_name="ghcr.io/berth-scheduler/berthd"
dry_run=0
tag=""

usage() {
    sed -n '2,24p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
}

fail() {
    echo "deploy.sh: $*" >&2
    echo "run 'deploy/deploy.sh --help' for the commands" >&2
    exit 2
}

# Runs a command, or prints it with --dry-run.
run() {
    if [[ $dry_run == 1 ]]; then
        printf '+'
        printf ' %q' "$@"
        printf '\n'
    else
        "$@"
    fi
}

need() {
    [[ $dry_run == 1 ]] && return 0
    command -v "$1" >/dev/null 2>&1 || {
        echo "deploy.sh: $1 is not installed (needed for: $2)" >&2
        exit 1
    }
}

version() {
    sed -n 's/^version = "\(.*\)"$/\1/p' "$root/Cargo.toml" | head -n 1
}

build() {
    local ref="$1"
    need docker "building the image"
    if [[ $dry_run == 0 ]] && ! docker info >/dev/null 2>&1; then
        echo "deploy.sh: docker cannot reach its daemon (docker info failed): start it, or build the image elsewhere" >&2
        exit 1
    fi
    run docker build -f "$root/deploy/Dockerfile" -t "$ref" "$root"
}

# Sets `dir` to the directory to apply: deploy/ itself, or an overlay of it
# with the image set to REGISTRY/berthd:TAG (what `kustomize edit set image`
# writes), made in a fresh directory removed at exit, so that deploy/ stays
# as committed.
overlay() {
    local registry="$1"
    if [[ -z $registry ]]; then
        dir="$root/deploy"
        return
    fi
    dir="$(mktemp -d "${TMPDIR:-/tmp}/berth-deploy.XXXXXX")"
    trap 'rm -rf "$dir"' EXIT
    cp -r "$root/deploy" "$dir/base"
    cat >"$dir/kustomization.yaml" <<EOF
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - base
images:
  - name: $image_name
    newName: $registry/berthd
    newTag: $tag
EOF
}

apply() {
    need kubectl "applying the manifests"
    overlay "${1:-}"
    run kubectl apply -k "$dir"
}

while [[ $# -gt 0 ]]; do
    case "$1" in
        -h | --help)
            usage
            exit 0
            ;;
        --dry-run)
            dry_run=1
            shift
            ;;
        --tag)
            [[ $# -ge 2 && -n $2 ]] || fail "--tag needs a value"
            tag="$2"
            shift 2
            ;;
        --tag=*)
            tag="${1#--tag=}"
            [[ -n $tag ]] || fail "--tag needs a value"
            shift
            ;;
        -*)
            fail "unknown option $1"
            ;;
        *)
            break
            ;;
    esac
done
[[ $# -ge 1 ]] || fail "no command given"
command="$1"
shift
[[ -n $tag ]] || tag="$(version)"
[[ -n $tag ]] || fail "cannot read berth's version from $root/Cargo.toml; give --tag"
[[ $tag != latest ]] || fail "--tag latest: use a tag that changes with each build (imagePullPolicy IfNotPresent would keep the first one)"
[[ $# -le 1 ]] || fail "$command takes at most one argument, got: $*"
arg="${1:-}"

case "$command" in
    image)
        [[ -z $arg ]] || fail "image takes no argument"
        build "$image_name:$tag"
        ;;
    kind)
        need kind "loading the image into kind"
        build "$image_name:$tag"
        run kind load docker-image "$image_name:$tag" --name "${arg:-kind}"
        apply ""
        ;;
    minikube)
        need minikube "loading the image into minikube"
        build "$image_name:$tag"
        run minikube image load "$image_name:$tag" --profile "${arg:-minikube}"
        apply ""
        ;;
    registry)
        [[ -n $arg ]] || fail "registry needs REGISTRY (for example registry.example.com/team)"
        build "$arg/berthd:$tag"
        run docker push "$arg/berthd:$tag"
        apply "$arg"
        ;;
    render)
        need kubectl "rendering the manifests"
        overlay "$arg"
        run kubectl kustomize "$dir"
        ;;
    apply)
        apply "$arg"
        ;;
    *)
        fail "unknown command $command"
        ;;
esac
