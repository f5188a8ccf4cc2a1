"""The Databricks bundle, offline: every job definition passes databricks-bundles' typed
models for each target, every file and entry point it names exists, and the project's
invariants hold (job clusters with RocksDB, continuous streaming, pause status per target)."""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from databricks.bundles.jobs import Job

from controlplane.engine.options import KafkaEndpoint, parse_engine_options
from controlplane.settings import load_settings

ROOT = Path(__file__).resolve().parents[2]
RESOURCES = ROOT / "conf" / "bundle" / "resources"
VARIABLE = re.compile(r"\$\{var\.([a-z_]+)\}")


def bundle() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((ROOT / "databricks.yml").read_text())
    return loaded


def jobs() -> dict[str, tuple[Path, dict[str, Any]]]:
    found: dict[str, tuple[Path, dict[str, Any]]] = {}
    for pattern in bundle()["include"]:
        for file in sorted(ROOT.glob(pattern)):
            for name, job in yaml.safe_load(file.read_text())["resources"]["jobs"].items():
                found[name] = (file, job)
    return found


def variables(target: str) -> dict[str, str]:
    values = {name: str(spec.get("default", "")) for name, spec in bundle()["variables"].items()}
    values.update({k: str(v) for k, v in bundle()["targets"][target].get("variables", {}).items()})
    return values


def resolve(node: Any, values: dict[str, str]) -> Any:
    if isinstance(node, dict):
        return {k: resolve(v, values) for k, v in node.items()}
    if isinstance(node, list):
        return [resolve(v, values) for v in node]
    if isinstance(node, str):
        return VARIABLE.sub(lambda m: values[m.group(1)], node)
    return node


def test_the_bundle_has_dev_and_prod_targets_and_the_wheel_artifact() -> None:
    config = bundle()
    assert set(config["targets"]) == {"dev", "prod"}
    assert config["targets"]["dev"]["mode"] == "development"
    assert config["targets"]["prod"]["mode"] == "production"
    assert {"catalog", "schema", "checkpoint_root"} <= set(config["variables"])
    (artifact,) = config["artifacts"].values()
    assert artifact["type"] == "whl"
    assert (ROOT / artifact["path"] / "pyproject.toml").is_file()


@pytest.mark.parametrize("target", ["dev", "prod"])
def test_every_job_passes_the_typed_models(target: str) -> None:
    values = variables(target)
    for name, (_, job) in jobs().items():
        resolved = resolve(job, values)
        assert not VARIABLE.search(str(resolved)), f"{name}: unknown variable"
        Job.from_dict(resolved)  # raises on unknown fields and bad enum values


def test_streaming_jobs_are_continuous_on_job_clusters_with_rocksdb() -> None:
    found = jobs()
    for name in ("coordinator", "quota"):
        _, job = found[name]
        assert "continuous" in job
        assert "environments" not in job  # serverless rejects processing-time triggers
        (cluster,) = job["job_clusters"]
        conf = cluster["new_cluster"]["spark_conf"]
        assert conf["spark.sql.streaming.stateStore.providerClass"].endswith(
            "RocksDBStateStoreProvider"
        )
        assert (
            conf["spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"] == "true"
        )
        for task in job["tasks"]:
            assert task["job_cluster_key"] == cluster["job_cluster_key"]
    schedule = found["maintenance"][1]["schedule"]
    assert schedule["quartz_cron_expression"]


def test_pause_status_is_set_per_target() -> None:
    assert variables("dev")["pause_status"] == "PAUSED"
    assert variables("prod")["pause_status"] == "UNPAUSED"
    for name, (_, job) in jobs().items():
        trigger = job.get("continuous") or job.get("schedule")
        assert trigger["pause_status"] == "${var.pause_status}", name


def test_every_file_and_entry_point_named_exists() -> None:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    for name, (file, job) in jobs().items():
        for task in job["tasks"]:
            if "spark_python_task" in task:
                script = (file.parent / task["spark_python_task"]["python_file"]).resolve()
                assert script.is_file(), f"{name}: {script}"
                assert script.is_relative_to(ROOT / "jobs")
            if "python_wheel_task" in task:
                wheel = task["python_wheel_task"]
                assert wheel["package_name"] == "controlplane"
                # the entry point that raises on failure: a wheel task may ignore a return
                assert scripts[wheel["entry_point"]] == "controlplane.__main__:task"
                command = wheel["parameters"][0]
                assert (ROOT / "lib" / "controlplane" / "cli" / f"{command}.py").is_file()
            for library in task["libraries"]:
                if "whl" in library:
                    assert (file.parent / library["whl"]).resolve().parent == ROOT / "dist"


# The Kafka variant of the dev target: `databricks bundle deploy -t dev --var config=...`
KAFKA_VARIANT = "conf/dev-kafka.yaml"


def bundle_configs() -> list[str]:
    return sorted({variables(target)["config"] for target in ("dev", "prod")} | {KAFKA_VARIANT})


@pytest.mark.parametrize("config", bundle_configs())
def test_the_config_files_the_bundle_names_exist_and_validate(config: str) -> None:
    options = parse_engine_options(load_settings(ROOT / config))
    assert options.coordinator_source is not None
    assert options.quota_source is not None
    assert config in str(bundle()["variables"]["config"]["description"])


def test_the_jobs_write_and_maintain_tables_by_name_in_the_bundles_schema() -> None:
    """Unity Catalog tables by name, catalog.schema.<table>, built from the bundle's variables
    and passed by every job; the settings files say the same for their target, and nothing
    falls back to delta-rs (which writes paths, and is not installed on the cluster)."""
    from controlplane.engine.launch import parse_args
    from controlplane.engine.options import with_tables

    for name, (_, job) in jobs().items():
        for task in job["tasks"]:
            parameters = (task.get("spark_python_task") or task["python_wheel_task"])["parameters"]
            assert "--tables-root" not in parameters, name
            schema = parameters[parameters.index("--tables-schema") + 1]
            assert schema == "${var.catalog}.${var.schema}", name
            if "python_wheel_task" in task:  # maintenance: Spark SQL's OPTIMIZE and VACUUM
                assert parameters[parameters.index("--engine") + 1] == "spark"
    for target in ("dev", "prod"):
        values = variables(target)
        configs = [values["config"], *([KAFKA_VARIANT] if target == "dev" else [])]
        for config in configs:
            options = parse_engine_options(load_settings(ROOT / config))
            assert options.writer == "native"
            assert options.tables_schema == f"{values['catalog']}.{values['schema']}", config
            for name in ("coordinator", "quota"):
                _, job = jobs()[name]
                (task,) = job["tasks"]
                argv = resolve(task["spark_python_task"]["parameters"], values)
                args = parse_args(argv, "")
                chosen = with_tables(options, root=args.tables_root, schema=args.tables_schema)
                assert chosen.tables_schema == options.tables_schema


def test_prod_and_the_kafka_variant_read_kafka_with_an_answers_topic() -> None:
    for config in (variables("prod")["config"], KAFKA_VARIANT):
        options = parse_engine_options(load_settings(ROOT / config))
        assert options.answers_topic
        for source in (options.coordinator_source, options.quota_source):
            assert source is not None
            assert source.format == "kafka"
            assert source.starting_offsets == "earliest"
            assert source.kafka_options["security.protocol"] == "SASL_SSL"
        assert options.quota_source is not None
        assert options.quota_source.user_header == "user"


SECRET = re.compile(r"\{\{secrets/([^/{}]+)/([^/{}]+)\}\}")


@pytest.mark.parametrize("config", [KAFKA_VARIANT, "conf/prod.yaml"])
def test_kafka_credentials_are_databricks_secret_references_the_job_can_resolve(
    config: str,
) -> None:
    """No credential in the file: the JAAS user and password are ``{{secrets/...}}``
    references, which the job resolves at start with dbutils.secrets (faked here), and what
    they resolve to is a configuration the engine's Python clients accept (Databricks' shaded
    login module included)."""
    from controlplane.engine.secrets import resolve_mapping
    from controlplane.io.kafka_clients import python_client_config

    options = parse_engine_options(load_settings(ROOT / config))
    read: list[tuple[str, str]] = []

    def dbutils_secrets_get(scope: str, key: str) -> str:
        read.append((scope, key))
        return f"<{scope}/{key}>"

    for source in (options.coordinator_source, options.quota_source):
        assert source is not None
        jaas = source.kafka_options["sasl.jaas.config"]
        assert jaas.startswith("kafkashaded.org.apache.kafka.common.security.")
        assert {key for _, key in SECRET.findall(jaas)} == {"username", "password"}
        resolved = resolve_mapping("kafka_options", source.kafka_options, dbutils_secrets_get)
        assert "{{" not in str(resolved)
        client = python_client_config(KafkaEndpoint(str(source.kafka_bootstrap_servers), resolved))
        scope = read[-1][0]
        assert client["sasl_plain_username"] == f"<{scope}/username>"
        assert client["sasl_plain_password"] == f"<{scope}/password>"
    assert read


def test_the_streaming_jobs_install_the_kafka_client_the_project_pins() -> None:
    """The driver's topic check and answers producer need kafka-python; the wheel's own
    dependencies do not bring it (it is in the spark extra, which a runtime replaces)."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    [pin] = [spec.split()[0] for spec in extras["spark"] if spec.startswith("kafka-python")]
    for name in ("coordinator", "quota"):
        _, job = jobs()[name]
        for task in job["tasks"]:
            packages = [lib["pypi"]["package"] for lib in task["libraries"] if "pypi" in lib]
            assert packages == [pin], name


def test_the_task_entry_point_fails_the_task_when_the_command_fails(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from controlplane.__main__ import task

    monkeypatch.setattr(sys, "argv", ["controlplane-task", "no-such-command"])
    with pytest.raises(SystemExit) as failed:
        task()
    assert failed.value.code == 2
    monkeypatch.setattr(sys, "argv", ["controlplane-task", "--help"])
    task()  # a command that succeeds returns normally
    assert "usage" in capsys.readouterr().err
