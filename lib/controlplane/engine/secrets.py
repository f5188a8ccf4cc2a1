"""Secret references in Kafka client options: credentials are named in the settings file, never
written in it.

Two forms, anywhere inside a value (a ``sasl.jaas.config`` holds a user name and a password
among other text):

* ``{{secrets/SCOPE/KEY}}``: a Databricks secret, read at job start with
  ``dbutils.secrets.get(SCOPE, KEY)`` (the same form Databricks accepts in a cluster's Spark
  configuration); outside Databricks there is no secret store and the job refuses to start;
* ``${ENV:NAME}``: the environment variable ``NAME`` of the driver (local runs, CI; on
  Databricks a job cluster's ``spark_env_vars`` may itself be a ``{{secrets/...}}`` reference).

``check_references`` runs when the settings are parsed (a malformed reference is a
configuration error naming the key); ``resolve`` runs once on the driver when a query is built,
so resolved values live only in the running job, never in a file or a log line.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from typing import Final

from controlplane.core.config import ConfigError

SECRET: Final = re.compile(r"\{\{secrets/([A-Za-z0-9_.@-]+)/([A-Za-z0-9_.@-]+)\}\}")
ENV: Final = re.compile(r"\$\{ENV:([A-Za-z_][A-Za-z0-9_]*)\}")
REFERENCE: Final = re.compile(f"{SECRET.pattern}|{ENV.pattern}")
# what starts a reference: anything else that starts like one is a typo, refused
_OPENERS: Final = re.compile(r"\{\{|\$\{")
# a JAAS option that holds a credential: ``password="..."`` (quotes optional in Kafka's parser)
_JAAS_PASSWORD: Final = re.compile(r"""\bpassword\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s;]+))""")

SecretLookup = Callable[[str, str], str]


def check_references(where: str, value: str) -> None:
    """Every ``{{`` or ``${`` in ``value`` must open a well-formed reference."""
    covered = {m.start() for m in REFERENCE.finditer(value)}
    for opener in _OPENERS.finditer(value):
        if opener.start() not in covered:
            raise ConfigError(
                f"{where}: malformed secret reference at {value[opener.start() :][:40]!r}; "
                "expected {{secrets/SCOPE/KEY}} or ${ENV:NAME}"
            )


def is_reference(value: str) -> bool:
    return REFERENCE.fullmatch(value) is not None


def check_credential(where: str, key: str, value: str) -> None:
    """A password is a reference, never written inline: a ``*.password`` option is exactly one
    reference, and so is each ``password=`` of a ``sasl.jaas.config``."""
    if key.endswith(".password") and not is_reference(value):
        raise ConfigError(f"{where}: a password must be a secret reference, not inline")
    if key == "sasl.jaas.config":
        for match in _JAAS_PASSWORD.finditer(value):
            secret = next(group for group in match.groups() if group is not None)
            if not is_reference(secret):
                raise ConfigError(
                    f"{where}: the JAAS password must be a secret reference "
                    '(password="{{secrets/SCOPE/KEY}}" or password="${ENV:NAME}"), not inline'
                )


def resolve(
    where: str,
    value: str,
    lookup: SecretLookup | None,
    environ: Mapping[str, str] | None = None,
) -> str:
    """``value`` with every reference replaced by what it names. ``lookup`` reads a Databricks
    secret (None outside Databricks); an unset variable or a missing store fails, naming the key
    and the reference but never a value."""
    env = os.environ if environ is None else environ

    def replace(match: re.Match[str]) -> str:
        scope, key, name = match.group(1), match.group(2), match.group(3)
        if name is not None:
            if name not in env:
                raise ConfigError(f"{where}: environment variable {name} is not set")
            return env[name]
        if lookup is None:
            raise ConfigError(
                f"{where}: {{{{secrets/{scope}/{key}}}}} needs the Databricks secret store "
                "(dbutils.secrets); outside Databricks use ${ENV:NAME}"
            )
        try:
            return lookup(scope, key)
        except Exception as exc:
            raise ConfigError(
                f"{where}: cannot read secret {key!r} of scope {scope!r}: {type(exc).__name__}"
            ) from None

    return REFERENCE.sub(replace, value)


def resolve_mapping(
    where: str,
    values: Mapping[str, str],
    lookup: SecretLookup | None,
    environ: Mapping[str, str] | None = None,
) -> dict[str, str]:
    return {key: resolve(f"{where}.{key}", value, lookup, environ) for key, value in values.items()}


def databricks_lookup() -> SecretLookup | None:  # pragma: no cover - Databricks only
    """``dbutils.secrets.get`` on a Databricks driver, else None."""
    if "DATABRICKS_RUNTIME_VERSION" not in os.environ:
        return None
    from pyspark.dbutils import DBUtils
    from pyspark.sql import SparkSession

    dbutils = DBUtils(SparkSession.builder.getOrCreate())

    def lookup(scope: str, key: str) -> str:
        return str(dbutils.secrets.get(scope=scope, key=key))

    return lookup
