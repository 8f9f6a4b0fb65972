# syntax=docker/dockerfile:1
#
# The esault image: the driver (`esault run`) and the workers (`esault worker`)
# of docker-compose.yml. Python 3.11 plus a Java runtime, because the Spark
# sink runs PySpark in the driver and PySpark starts a JVM.
#
#   docker build -t esault .
#   docker build --build-arg SPARK_VERSION=4.1.0 -t esault .   # match the cluster
#
# Offline under podman (no registry, no package index): deploy/podman/build-images.sh
# builds it FROM a Debian base image that already has Python 3.11 and Java 17
# (--build-arg BASE_IMAGE=...) with pip pointed at a wheelhouse mounted at /wheels.

ARG BASE_IMAGE=python:3.11-slim-bookworm
FROM ${BASE_IMAGE}

# PySpark's version must equal the Spark cluster's (docker-compose.yml's
# spark-master/spark-worker images use the same SPARK_VERSION).
ARG SPARK_VERSION=4.0.1

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# Java 17 runs Spark 4.x; procps gives PySpark's scripts `ps` (the offline base has both).
RUN if ! command -v java >/dev/null || ! command -v ps >/dev/null; then \
        apt-get update \
        && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
        && rm -rf /var/lib/apt/lists/*; \
    fi \
    && ln -s "$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")" /opt/java
ENV JAVA_HOME=/opt/java

WORKDIR /opt/esault

# Dependencies first, from setup.cfg alone, so that a code change does not
# reinstall PySpark; with the `kafka` extra (confluent-kafka) for the Kafka
# connectors (examples/kafka_clicks.py against the compose broker).
COPY pyproject.toml setup.cfg ./
RUN python -c "import configparser; c = configparser.ConfigParser(); c.read('setup.cfg'); print(c['options']['install_requires'].strip()); print(c['options.extras_require']['kafka'].strip())" > /tmp/requirements.txt \
    && pip install -r /tmp/requirements.txt "pyspark==${SPARK_VERSION}" \
    && rm /tmp/requirements.txt

# Then the package itself (and examples/, which the driver runs).
COPY . .
RUN pip install --no-deps .

# Run as uid 185, the `spark` user of the official Spark images, so files the
# driver and the Spark executors write on the shared /data volume have one owner.
# /opt/esault is writable for esault-data/ (dead letters, state) and Spark's
# local scratch files; the code itself stays root-owned.
RUN groupadd --system --gid 185 esault \
    && useradd --system --uid 185 --gid 185 --create-home --home-dir /home/esault esault \
    && mkdir -p /data/warehouse \
    && chown esault:esault /opt/esault /data /data/warehouse
USER 185:185

# Driver: workers connect here. Every esault process: /metrics on 9100.
EXPOSE 5555 9100

CMD ["esault", "--help"]
