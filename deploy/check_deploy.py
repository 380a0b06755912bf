"""Checks the structure of the deployment artifacts (no schema checker is installable here
from PyPI or npm, so the fields Kubernetes, the Gateway API Inference Extension and
vllm-router rely on are checked by hand). Argument: the repository root. Needs PyYAML.

Every `kiln serve` flag used in the manifests and the Dockerfile must be in
docs/serving.md's option table, which lists every flag `kiln serve` accepts.
"""

import re
import sys
from pathlib import Path

import yaml


def fail(why):
    print(f"deploy: {why}", file=sys.stderr)
    sys.exit(1)


def need(cond, why):
    if not cond:
        fail(why)


def main():
    root = Path(sys.argv[1])
    k8s = root / "deploy" / "kubernetes"
    flags = set(re.findall(r"^\| `(--[a-z-]+)", (root / "docs" / "serving.md").read_text(), re.M))
    need("--kv-events" in flags and "--shutdown-delay" in flags, f"serving.md flags: {sorted(flags)}")

    dep = yaml.safe_load((k8s / "deployment.yaml").read_text())
    need(dep["apiVersion"] == "apps/v1" and dep["kind"] == "Deployment", "deployment kind")
    labels = dep["spec"]["selector"]["matchLabels"]
    pod = dep["spec"]["template"]
    need(pod["metadata"]["labels"] == labels, "the pod labels differ from the selector")
    spec = pod["spec"]
    need(spec["securityContext"]["runAsNonRoot"] is True, "pods must run as non-root")
    (c,) = spec["containers"]
    args = c["args"]
    for a in args:
        if a.startswith("--"):
            need(a in flags, f"{a} is not a kiln serve flag (docs/serving.md)")

    def arg(name):
        need(name in args, f"the container has no {name}")
        return args[args.index(name) + 1]

    delay, drain = float(arg("--shutdown-delay")), float(arg("--drain-timeout"))
    grace = spec["terminationGracePeriodSeconds"]
    need(grace > delay + drain, f"grace period {grace} <= shutdown delay {delay} + drain {drain}")
    events = arg("--kv-events")
    events_port = int(events.rsplit(":", 1)[1])
    need("$(POD_IP)" in arg("--kv-events-topic"), "the events topic names the pod")
    need(any(e["name"] == "POD_IP" and e["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
             for e in c["env"]), "POD_IP from status.podIP")
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    need(ports.get("http") == 8080 and ports.get("kv-events") == events_port, f"ports {ports}")
    ready, live = c["readinessProbe"]["httpGet"], c["livenessProbe"]["httpGet"]
    need(ready["path"] == "/health" and live["path"] == "/health/live", "probe paths")
    need(c["startupProbe"]["httpGet"]["path"] == "/health", "startup probe path")
    period = c["readinessProbe"]["periodSeconds"] * c["readinessProbe"].get("failureThreshold", 3)
    need(period < delay, f"readiness notices in {period} s, after the shutdown delay {delay} s")

    svc = yaml.safe_load((k8s / "service.yaml").read_text())
    need(svc["kind"] == "Service" and svc["spec"]["selector"] == labels, "service selector")
    need({p["targetPort"] for p in svc["spec"]["ports"]} == {"http", "kv-events"}, "service ports")

    pool = yaml.safe_load((k8s / "inferencepool.yaml").read_text())
    need(pool["kind"] == "InferencePool" and pool["apiVersion"].startswith("inference.networking"),
         "InferencePool kind")
    need(pool["spec"]["selector"]["matchLabels"] == labels, "pool selector")
    need(pool["spec"]["targetPorts"][0]["number"] == 8080, "pool port")
    need(pool["spec"]["endpointPickerRef"]["name"], "pool endpoint picker")

    values = yaml.safe_load((k8s / "llm-d-router-values.yaml").read_text())
    need(values["inferencePool"]["modelServers"]["matchLabels"] == labels, "values selector")
    mapped = {f["name"]: f["value"] for f in values["inferenceExtension"]["flags"]}
    metrics_doc = (root / "docs" / "serving.md").read_text()
    for name in mapped.values():
        need(f"`{name}`" in metrics_doc, f"{name} is not a metric in docs/serving.md")
    yaml.safe_load(values["inferenceExtension"]["pluginsCustomConfig"]["kiln-plugins.yaml"])

    docker = (root / "Dockerfile").read_text()
    froms = re.findall(r"^FROM\s+(\S+)(?:\s+AS\s+(\S+))?", docker, re.M)
    need(len(froms) >= 2, "the Dockerfile is not multi-stage")
    need(all(":" in image and not image.endswith(":latest") for image, _ in froms),
         "base images must be pinned")
    users = re.findall(r"^USER\s+(\S+)", docker, re.M)
    need(users and not users[-1].startswith(("root", "0")), "the image must run as non-root")
    need(re.search(r"^COPY --from=", docker, re.M), "the runtime stage copies from the build")
    need("--locked" in docker, "the build must use the lock file")
    for a in re.findall(r'"(--[a-z-]+)"', docker):
        need(a in flags, f"Dockerfile flag {a} is not a kiln serve flag")
    print("ok")


main()
