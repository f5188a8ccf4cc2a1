"""The Databricks bundle, offline. For each target, with the variables resolved as the CLI
resolves them (defaults, the target's values, ``--var``) for a given deploying identity:

* the configuration passes the Databricks CLI's own JSON schema for bundles (what
  ``databricks bundle schema`` prints, vendored in tests/data/databricks_bundle_schema), raw
  and resolved, and every job passes databricks-bundles' typed models;
* the CLI's target-mode rules hold (bundle/config/mutator/resourcemutator/
  validate_target_mode.go and run_as.go of the same CLI version), and the project's stricter
  ones: prod runs as a service principal, from an explicit root path, with permissions, and
  nothing meant for development; dev keeps every path per developer;
* the jobs run the installed wheel's entry points on dedicated clusters of the job's
  principal, with Databricks' RocksDB provider, failure and backlog notifications, and the
  files and entry points they name exist.

What the CLI checks against a workspace (that the principal, groups, policy and node type
exist; the deploy itself) is not checked here: docs/engine.md, "Deploying on Databricks"."""

from __future__ import annotations

import copy
import json
import re
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from databricks.bundles.jobs import Job

from controlplane.engine.options import parse_engine_options
from controlplane.engine.session import DATABRICKS_ROCKSDB_PROVIDER
from controlplane.io.options import MAX_RECORDS_PER_TRIGGER, KafkaEndpoint
from controlplane.settings import load_settings

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT / "tests" / "data" / "databricks_bundle_schema" / "jsonschema.json"
REFERENCE = re.compile(r"\$\{([A-Za-z0-9_.\-\[\]]+)\}")


@dataclass(frozen=True)
class Deployer:
    """Who runs ``databricks bundle deploy``: ``workspace.current_user``."""

    user_name: str
    short_name: str


ALICE = Deployer("alice.smith@example.com", "alice_smith")
BOB = Deployer("bob@example.com", "bob")
SERVICE_PRINCIPAL = "6f3b0c1e-2a4d-4c8e-9b7a-0d1e2f3a4b5c"  # an application id
PROD_DEPLOYER = Deployer(SERVICE_PRINCIPAL, "controlplane_prod")
# What each target needs from the command line (--var): the node type depends on the cloud,
# the service principal on the workspace.
DEV_VARS = {"node_type_id": "Standard_D4ds_v5"}
PROD_VARS = {"node_type_id": "i3.xlarge", "service_principal": SERVICE_PRINCIPAL}


class MissingVariable(Exception):
    pass


def bundle() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((ROOT / "databricks.yml").read_text())
    return loaded


def include_files() -> list[Path]:
    return [file for pattern in bundle()["include"] for file in sorted(ROOT.glob(pattern))]


def merge(base: Any, override: Any) -> Any:
    """The CLI's target override: mappings merged key by key, anything else replaced."""
    if isinstance(base, dict) and isinstance(override, dict):
        merged = dict(base)
        for key, value in override.items():
            merged[key] = merge(base[key], value) if key in base else value
        return merged
    return copy.deepcopy(override)


# The keys a target may set that `configure` knows how to apply.
TARGET_KEYS = {"mode", "default", "workspace", "run_as", "permissions", "variables", "presets"}


def variable_values(target: str, cli_vars: dict[str, Any]) -> dict[str, Any]:
    """Each variable's value before references are resolved: ``--var``, else the target's,
    else the default; none of these: the CLI refuses ("no value assigned to required
    variable")."""
    declared = bundle()["variables"]
    overrides = bundle()["targets"][target].get("variables", {})
    unknown = (set(overrides) | set(cli_vars)) - set(declared)
    assert not unknown, f"values for undeclared variables {sorted(unknown)}"
    values: dict[str, Any] = {}
    for name, spec in declared.items():
        if name in cli_vars:
            values[name] = cli_vars[name]
        elif name in overrides:
            values[name] = overrides[name]
        elif "default" in spec:
            values[name] = spec["default"]
        else:
            raise MissingVariable(name)
    return values


def configure(target: str, deployer: Deployer, cli_vars: dict[str, Any]) -> dict[str, Any]:
    """databricks.yml with its includes, the target's settings applied and every reference
    resolved; raises KeyError naming a reference the CLI would not resolve."""
    root = bundle()
    settings = root["targets"][target]
    assert set(settings) <= TARGET_KEYS, f"{target}: {sorted(set(settings) - TARGET_KEYS)}"
    config = {k: copy.deepcopy(v) for k, v in root.items() if k not in ("targets", "variables")}
    for file in include_files():
        config = merge(config, yaml.safe_load(file.read_text()))
    for key in ("workspace", "run_as", "permissions", "presets"):
        if key in settings:
            config[key] = merge(config.get(key, {}), settings[key])
    workspace = config.setdefault("workspace", {})
    explicit_root = "root_path" in workspace
    workspace.setdefault("root_path", "~/.bundle/${bundle.name}/${bundle.target}")
    workspace.setdefault("file_path", "${workspace.root_path}/files")
    builtins = {
        "bundle.name": config["bundle"]["name"],
        "bundle.target": target,
        "workspace.current_user.userName": deployer.user_name,
        "workspace.current_user.short_name": deployer.short_name,
    }
    root_path = str(workspace["root_path"])
    if root_path.startswith("~/"):  # the deploying user's home
        root_path = f"/Workspace/Users/{deployer.user_name}/{root_path[2:]}"
    builtins["workspace.root_path"] = root_path
    builtins["workspace.file_path"] = workspace["file_path"]
    values = variable_values(target, cli_vars)
    lookup = {**builtins, **{f"var.{name}": value for name, value in values.items()}}
    for _ in range(10):  # references to references, as the CLI resolves them
        lookup = {name: resolve(value, lookup) for name, value in lookup.items()}
    assert not REFERENCE.search(json.dumps(lookup)), "references in a cycle, or too deep"
    resolved: dict[str, Any] = resolve(config, lookup)
    resolved["workspace"]["root_path"] = lookup["workspace.root_path"]
    resolved["workspace"]["file_path"] = lookup["workspace.file_path"]
    # What the CLI knows of the target besides the configuration ("_": not in the schema).
    resolved["_variables"] = {name: lookup[f"var.{name}"] for name in values}
    resolved["_mode"] = settings.get("mode")
    resolved["_explicit_root_path"] = explicit_root
    if "run_as" in resolved:  # the CLI gives every job the bundle's run_as
        for job in resolved["resources"]["jobs"].values():
            job.setdefault("run_as", dict(resolved["run_as"]))
    return resolved


def resolve(node: Any, lookup: dict[str, Any]) -> Any:
    if isinstance(node, dict):
        return {k: resolve(v, lookup) for k, v in node.items()}
    if isinstance(node, list):
        return [resolve(v, lookup) for v in node]
    if not isinstance(node, str):
        return node
    whole = REFERENCE.fullmatch(node)
    if whole:  # a lone reference keeps its value's type (a list, a number)
        return lookup[whole.group(1)]
    return REFERENCE.sub(lambda m: str(lookup[m.group(1)]), node)


def dev(deployer: Deployer = ALICE) -> dict[str, Any]:
    return configure("dev", deployer, DEV_VARS)


def prod(cli_vars: dict[str, Any] | None = None) -> dict[str, Any]:
    return configure("prod", PROD_DEPLOYER, PROD_VARS if cli_vars is None else cli_vars)


def jobs(config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = config["resources"]["jobs"]
    return found


# ---------------------------------------------------------------------------------------------
# The CLI's JSON schema


def cli_schema_validator() -> Any:
    """A validator of the vendored schema. Its reference patterns use ``\\p{L}`` and
    ``\\p{N}`` (Go's regexp), which Python's ``re`` lacks: written as the same Unicode classes
    (``[\\p{L}\\p{N}]`` = a letter or a digit = ``[^\\W_]``)."""
    text = SCHEMA.read_text()
    text = text.replace(r"[\\p{L}\\p{N}]", r"[^\\W_]").replace(r"\\p{L}", r"[^\\W\\d_]")
    assert r"\\p{" not in text, "a Unicode class the translation does not know"
    schema = json.loads(text)
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


def schema_errors(config: dict[str, Any]) -> list[str]:
    """Each error where it is: the schema allows a reference (``${var.x}``) in place of most
    values (``oneOf``), so an error inside a job is reported on the job's ``oneOf``; its
    innermost errors say what and where."""
    document = {k: v for k, v in config.items() if not k.startswith("_")}
    leaves: list[Any] = []

    def innermost(error: Any) -> None:
        if not error.context:
            leaves.append(error)
        for inner in error.context:
            innermost(inner)

    for error in cli_schema_validator().iter_errors(document):
        innermost(error)
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message[:200]}" for e in leaves]


def test_the_schema_is_the_cli_s_and_refuses_what_the_cli_refuses() -> None:
    """The validator is live: a misspelt key and a value outside an enum are refused, a
    variable reference where an enum goes is accepted (the CLI resolves it later)."""
    config = dev()
    assert schema_errors(config) == []
    job = jobs(config)["coordinator"]
    job["continous"] = job.pop("continuous")
    job["job_clusters"][0]["new_cluster"]["data_security_mode"] = "DEDICATED"
    errors = schema_errors(config)
    assert any("continous" in error for error in errors), errors
    assert any("data_security_mode" in error for error in errors), errors
    job["job_clusters"][0]["new_cluster"]["data_security_mode"] = "${var.access_mode}"
    assert not any("data_security_mode" in error for error in schema_errors(config))


@pytest.mark.parametrize("file", [ROOT / "databricks.yml", *include_files()], ids=lambda p: p.name)
def test_every_file_as_written_passes_the_cli_schema(file: Path) -> None:
    assert schema_errors(yaml.safe_load(file.read_text())) == []


@pytest.mark.parametrize("target", ["dev", "prod"])
def test_every_target_resolved_passes_the_cli_schema_and_the_typed_models(target: str) -> None:
    config = dev() if target == "dev" else prod()
    assert schema_errors(config) == []
    for name, job in jobs(config).items():
        assert not REFERENCE.search(json.dumps(job)), f"{name}: unresolved reference"
        Job.from_dict(job)  # raises on unknown fields and bad enum values


# ---------------------------------------------------------------------------------------------
# Target modes


def production_errors(config: dict[str, Any]) -> list[str]:
    """The CLI's production-mode and run_as checks, and the project's stricter rules."""
    errors = []
    if not config["_explicit_root_path"]:
        errors.append("workspace.root_path must be set (one copy of the deployment)")
    run_as = config.get("run_as") or {}
    identities = [v for k, v in run_as.items() if k in ("user_name", "service_principal_name")]
    if len([i for i in identities if i]) != 1:
        errors.append("run_as must name exactly one identity")
    principal = run_as.get("service_principal_name")
    if not principal:
        errors.append("run_as: a service principal, not a person")
    elif principal not in config["workspace"]["root_path"]:
        errors.append("root_path: under the service principal's home")
    for name, job in jobs(config).items():
        if job.get("run_as") != run_as:
            errors.append(f"{name}: runs as the bundle's run_as")
    levels = {(p.get("group_name"), p["level"]) for p in config.get("permissions", [])}
    for level in ("CAN_MANAGE", "CAN_VIEW"):
        if not any(group and lvl == level for group, lvl in levels):
            errors.append(f"permissions: a group with {level}")
    errors += [f"{key}: development-only" for key in ("presets",) if key in config]
    for pipeline in config["resources"].get("pipelines", {}).values():
        if pipeline.get("development"):
            errors.append("a pipeline with development: true")
    lock = config["bundle"].get("deployment", {}).get("lock", {})
    if lock.get("enabled") is False:
        errors.append("bundle.deployment.lock disabled")
    for name, job in jobs(config).items():
        for task in job["tasks"]:
            if "existing_cluster_id" in task:
                errors.append(f"{name}: an existing (interactive) cluster")
        trigger = job.get("continuous") or job.get("schedule") or {}
        if trigger.get("pause_status") != "UNPAUSED" and name != "maintenance":
            errors.append(f"{name}: paused")
    return errors


def test_prod_passes_the_production_mode_rules() -> None:
    config = prod()
    assert production_errors(config) == []
    assert config["_mode"] == "production"
    assert config["run_as"] == {"service_principal_name": SERVICE_PRINCIPAL}
    assert config["workspace"]["root_path"] == (
        f"/Workspace/Users/{SERVICE_PRINCIPAL}/.bundle/controlplane/prod"
    )
    assert config["permissions"] == [
        {"group_name": "controlplane-admins", "level": "CAN_MANAGE"},
        {"group_name": "controlplane-viewers", "level": "CAN_VIEW"},
    ]


def test_prod_without_its_service_principal_is_refused() -> None:
    """`databricks bundle deploy -t prod` without --var service_principal: an empty run_as,
    which the CLI refuses, and so do these rules."""
    config = prod({"node_type_id": "i3.xlarge"})
    errors = production_errors(config)
    assert "run_as must name exactly one identity" in errors
    assert "run_as: a service principal, not a person" in errors


def test_the_production_rules_catch_a_development_setting() -> None:
    config = prod()
    config["presets"] = {"name_prefix": "[test] "}
    jobs(config)["quota"]["continuous"]["pause_status"] = "PAUSED"
    del config["permissions"][1]
    assert production_errors(config) == [
        "permissions: a group with CAN_VIEW",
        "presets: development-only",
        "quota: paused",
    ]


@pytest.mark.parametrize("target", ["dev", "prod"])
def test_every_variable_without_a_default_is_given_on_the_command_line(target: str) -> None:
    """Required variables: the node type (per cloud). The CLI refuses a target for which a
    variable has no value, even one the target does not use."""
    required = {name for name, spec in bundle()["variables"].items() if "default" not in spec}
    assert required == {"node_type_id"}
    with pytest.raises(MissingVariable):
        configure(target, ALICE, {})


def development_errors(config: dict[str, Any], deployer: Deployer) -> list[str]:
    """The CLI's development-mode checks (paths and prefixes unique per user, triggers not
    unpaused by default), and the project's: every place the jobs write is the developer's."""
    mine = (deployer.user_name, deployer.short_name)
    errors = []
    for key in ("root_path", "file_path", "artifact_path", "state_path", "resource_path"):
        path = config["workspace"].get(key)
        if path and not any(name in path for name in mine):
            errors.append(f"workspace.{key} is shared")
    presets = config.get("presets", {})
    if presets.get("trigger_pause_status") == "UNPAUSED":
        errors.append("presets.trigger_pause_status UNPAUSED")
    for name in ("schema", "checkpoint_root", "landing_root", "settings_file"):
        if deployer.short_name not in str(config["_variables"][name]):
            errors.append(f"var.{name} is shared")
    for name, job in jobs(config).items():
        trigger = job.get("continuous") or job.get("schedule") or {}
        if trigger.get("pause_status") != "PAUSED":
            errors.append(f"{name}: not paused")
    return errors


def test_dev_passes_the_development_mode_rules_with_paths_per_developer() -> None:
    alice, bob = dev(ALICE), dev(BOB)
    assert development_errors(alice, ALICE) == []
    assert development_errors(bob, BOB) == []
    assert alice["_mode"] == "development"
    assert alice["_variables"]["schema"] == "controlplane_dev_alice_smith"
    for name in ("checkpoint_root", "landing_root", "settings_file"):
        assert alice["_variables"][name] != bob["_variables"][name], name
        assert alice["_variables"][name].startswith("/Volumes/main/controlplane_dev_alice_smith/")
    assert "run_as" not in alice  # a developer's jobs run as the developer


def test_the_development_rules_catch_a_shared_path() -> None:
    config = configure("dev", ALICE, {**DEV_VARS, "schema": "controlplane_dev"})
    assert development_errors(config, ALICE) == [
        f"var.{name} is shared"
        for name in ("schema", "checkpoint_root", "landing_root", "settings_file")
    ]


# ---------------------------------------------------------------------------------------------
# Jobs


@pytest.mark.parametrize("target", ["dev", "prod"])
def test_job_clusters_are_dedicated_to_the_job_s_principal(target: str) -> None:
    """Unity Catalog and a SparkContext (the native Delta writer) need dedicated access mode;
    standard mode has no SparkContext."""
    config = dev() if target == "dev" else prod()
    principal = ALICE.user_name if target == "dev" else SERVICE_PRINCIPAL
    for name, job in jobs(config).items():
        assert job.get("run_as", {}).get("service_principal_name", ALICE.user_name) == principal
        for cluster in job["job_clusters"]:
            spec = cluster["new_cluster"]
            assert spec["data_security_mode"] == "SINGLE_USER", name  # = dedicated
            assert spec["single_user_name"] == principal, name
            assert (
                spec["node_type_id"]
                == (PROD_VARS if target == "prod" else DEV_VARS)["node_type_id"]
            )
            assert spec["policy_id"] == ""  # none unless --var cluster_policy_id
    raw = json.dumps(yaml.safe_load((ROOT / "conf/bundle/resources/streaming.job.yml").read_text()))
    assert "i3." not in raw  # no cloud's node type written in the jobs


def test_streaming_jobs_are_continuous_wheel_tasks_with_databricks_rocksdb() -> None:
    config = prod()
    settings_file = config["_variables"]["settings_file"]
    assert settings_file.startswith("/Volumes/main/controlplane/config/")
    for name in ("coordinator", "quota"):
        job = jobs(config)[name]
        assert job["continuous"] == {"pause_status": "UNPAUSED"}
        assert "environments" not in job  # serverless rejects processing-time triggers
        (cluster,) = job["job_clusters"]
        conf = cluster["new_cluster"]["spark_conf"]
        assert conf["spark.sql.streaming.stateStore.providerClass"] == DATABRICKS_ROCKSDB_PROVIDER
        assert (
            conf["spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"] == "true"
        )
        (task,) = job["tasks"]
        assert task["job_cluster_key"] == cluster["job_cluster_key"]
        assert "spark_python_task" not in task  # the synced lib/ never shadows the wheel
        wheel = task["python_wheel_task"]
        assert wheel["parameters"][:2] == ["job", name]
        parameters = dict(zip(wheel["parameters"][2::2], wheel["parameters"][3::2], strict=True))
        assert parameters == {
            "--config": settings_file,  # a Volume: a deploy never replaces the live settings
            "--tables-schema": "{catalog}.{schema}".format(**config["_variables"]),
            "--checkpoint-root": config["_variables"]["checkpoint_root"],
            "--landing-root": config["_variables"]["landing_root"],
        }


def test_streaming_jobs_report_failures_and_backlog() -> None:
    cli_vars = {
        **PROD_VARS,
        "failure_emails": ["oncall@example.com"],
        "failure_webhooks": [{"id": "pagerduty-destination"}],
    }
    config = prod(cli_vars)
    assert schema_errors(config) == []
    for name in ("coordinator", "quota"):
        job = jobs(config)[name]
        for event in ("on_failure", "on_streaming_backlog_exceeded"):
            assert job["email_notifications"][event] == ["oncall@example.com"], name
            assert job["webhook_notifications"][event] == [{"id": "pagerduty-destination"}]
        rules = {rule["metric"]: rule for rule in job["health"]["rules"]}
        assert set(rules) == {
            "STREAMING_BACKLOG_SECONDS",
            "STREAMING_BACKLOG_RECORDS",
            "STREAMING_BACKLOG_FILES",
        }
        assert {rule["op"] for rule in rules.values()} == {"GREATER_THAN"}
        assert rules["STREAMING_BACKLOG_SECONDS"]["value"] == 120
        Job.from_dict(job)
    maintenance = jobs(config)["maintenance"]
    assert maintenance["email_notifications"]["on_failure"] == ["oncall@example.com"]


def test_the_maintenance_job_runs_delta_s_own_optimize_and_vacuum() -> None:
    """The runtime has no delta-rs: the job runs OPTIMIZE and VACUUM through the cluster's
    Spark, and can be paused where predictive optimization maintains the tables."""
    config = prod()
    job = jobs(config)["maintenance"]
    (task,) = job["tasks"]
    parameters = task["python_wheel_task"]["parameters"]
    assert parameters[:3] == ["maintenance", "--engine", "spark"]
    tables_schema = parameters[parameters.index("--tables-schema") + 1]
    assert tables_schema == "{catalog}.{schema}".format(**config["_variables"])
    assert job["schedule"]["pause_status"] == "UNPAUSED"
    paused = prod({**PROD_VARS, "maintenance_pause_status": "PAUSED"})
    assert jobs(paused)["maintenance"]["schedule"]["pause_status"] == "PAUSED"
    assert jobs(paused)["coordinator"]["continuous"]["pause_status"] == "UNPAUSED"


def test_every_file_and_entry_point_named_exists() -> None:
    from controlplane.__main__ import COMMANDS

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    for file in include_files():
        for name, job in yaml.safe_load(file.read_text())["resources"]["jobs"].items():
            for task in job["tasks"]:
                wheel = task["python_wheel_task"]
                assert wheel["package_name"] == "controlplane"
                # the entry point that raises on failure: a wheel task may ignore a return
                assert scripts[wheel["entry_point"]] == "controlplane.__main__:task"
                assert (wheel["parameters"][0],) in COMMANDS, name
                for library in task["libraries"]:
                    if "whl" in library:
                        assert (file.parent / library["whl"]).resolve().parent == ROOT / "dist"


# ---------------------------------------------------------------------------------------------
# The settings files a deployment copies into its Volume

DATABRICKS_CONFIGS = ["conf/dev.yaml", "conf/dev-kafka.yaml", "conf/prod.yaml"]


@pytest.mark.parametrize("config", DATABRICKS_CONFIGS)
def test_the_databricks_settings_files_validate_and_never_fall_back_to_delta_rs(
    config: str,
) -> None:
    """`engine.writer: native` written out: `auto` on a session without a SparkContext would
    pick delta-rs, which the runtime does not have. query_progress commits grouped."""
    raw = yaml.safe_load((ROOT / config).read_text())
    assert raw["engine"]["writer"] == "native"
    options = parse_engine_options(load_settings(ROOT / config))
    assert options.writer == "native"
    assert options.progress_commit_interval_ms >= 10_000
    assert options.coordinator_source is not None
    assert options.quota_source is not None
    assert config in str(bundle()["variables"]["settings_file"]["description"])


def test_the_jobs_write_and_maintain_tables_by_name_in_the_bundles_schema() -> None:
    """Unity Catalog tables by name, catalog.schema.<table>, built from the bundle's variables
    and passed by every job (the developer's own schema in dev), winning over the settings
    file's; nothing falls back to delta-rs (which writes paths, and is not on the cluster)."""
    from controlplane.engine.launch import parse_args
    from controlplane.engine.options import with_tables

    for config in (dev(), dev(BOB), prod()):
        expected = "{catalog}.{schema}".format(**config["_variables"])
        for name, job in jobs(config).items():
            (task,) = job["tasks"]
            parameters = task["python_wheel_task"]["parameters"]
            assert "--tables-root" not in parameters, name
            assert parameters[parameters.index("--tables-schema") + 1] == expected, name
            if name == "maintenance":  # Spark SQL's OPTIMIZE and VACUUM, by name
                assert parameters[parameters.index("--engine") + 1] == "spark"
                continue
            args = parse_args(parameters[2:], "")
            for settings in DATABRICKS_CONFIGS:
                options = parse_engine_options(load_settings(ROOT / settings))
                assert options.writer == "native"
                chosen = with_tables(options, root=args.tables_root, schema=args.tables_schema)
                assert chosen.tables_schema == expected, (name, settings)
    prod_options = parse_engine_options(load_settings(ROOT / "conf/prod.yaml"))
    assert prod_options.tables_schema == "{catalog}.{schema}".format(**prod()["_variables"])


def test_prod_and_the_kafka_variant_read_kafka_with_an_answers_topic() -> None:
    for config in ("conf/prod.yaml", "conf/dev-kafka.yaml"):
        options = parse_engine_options(load_settings(ROOT / config))
        assert options.answers_topic
        for source in (options.coordinator_source, options.quota_source):
            assert source is not None
            assert source.format == "kafka"
            assert source.starting_offsets == "earliest"
            # the default: a cap that holds what arrives during the longest batch
            assert source.max_records_per_trigger == MAX_RECORDS_PER_TRIGGER
            assert source.kafka_options["security.protocol"] == "SASL_SSL"
        assert options.quota_source is not None
        assert options.quota_source.user_header == "user"


SECRET = re.compile(r"\{\{secrets/([^/{}]+)/([^/{}]+)\}\}")


@pytest.mark.parametrize("config", ["conf/dev-kafka.yaml", "conf/prod.yaml"])
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
    """The driver's topic check at start needs kafka-python; the wheel's own
    dependencies do not bring it (it is in the spark extra, which a runtime replaces)."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    [pin] = [spec.split()[0] for spec in extras["spark"] if spec.startswith("kafka-python")]
    for name in ("coordinator", "quota"):
        for task in jobs(prod())[name]["tasks"]:
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
    monkeypatch.setattr(sys, "argv", ["controlplane-task", "job", "no-such-query"])
    with pytest.raises(SystemExit) as failed:
        task()
    assert failed.value.code == 2
    assert "QUERY is one of coordinator, quota, all" in capsys.readouterr().err
    monkeypatch.setattr(sys, "argv", ["controlplane-task", "--help"])
    task()  # a command that succeeds returns normally
    assert "usage" in capsys.readouterr().out
