"""JobConfig and ElasticityConfig: validation messages, ESAULT_* overrides, TOML files."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

from esault.config import ElasticityConfig, JobConfig
from esault.errors import ConfigError


# ------------------------------------------------------------ ElasticityConfig
def test_elasticity_defaults_are_valid_and_frozen() -> None:
    cfg = ElasticityConfig()
    assert cfg.overload_reaction_time == 5 and cfg.max_spus == 8
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.max_latency = 1.0  # type: ignore[misc]


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("max_latency", 0, r"ElasticityConfig\.max_latency must be a number > 0, got 0"),
        ("max_latency", "0.1", r"ElasticityConfig\.max_latency must be a number > 0, got '0\.1'"),
        ("probe_period", -1.0, r"ElasticityConfig\.probe_period must be a number > 0, got -1\.0"),
        ("probe_period", True, r"ElasticityConfig\.probe_period must be a number > 0, got True"),
        ("overload_reaction_time", 0, r"ElasticityConfig\.overload_reaction_time must be a whole number >= 1, got 0"),
        ("underload_reaction_time", 2.5, r"ElasticityConfig\.underload_reaction_time must be a whole number >= 1, got 2\.5"),
        ("min_spus", True, r"ElasticityConfig\.min_spus must be a whole number >= 1, got True"),
        ("max_spus", 0, r"ElasticityConfig\.max_spus must be a whole number >= 1, got 0"),
        ("max_spus", 10**9, r"ElasticityConfig\.max_spus is 1000000000; a unit runs at most 1024 SPUs \(MAX_SPUS\)"),
        ("overload_reaction_factor", 1.5, r"ElasticityConfig\.overload_reaction_factor must be a fraction in \[0, 1\], got 1\.5"),
        ("low_watermark", -0.1, r"ElasticityConfig\.low_watermark must be a fraction in \[0, 1\], got -0\.1"),
        ("underload_reaction_factor", "high", r"ElasticityConfig\.underload_reaction_factor must be a fraction"),
        ("peak_reset_factor", 0.9, r"ElasticityConfig\.peak_reset_factor must be >= 1, got 0\.9"),
        ("cooldown", -1, r"ElasticityConfig\.cooldown must be a number >= 0 seconds, got -1"),
        ("min_split_gain", -0.1, r"ElasticityConfig\.min_split_gain must be a fraction of the rate between 0 and 10 "
                                 r"\(0\.1: the rate must have risen 10%; 0: never hold a split\), got -0\.1"),
        ("min_split_gain", True, r"ElasticityConfig\.min_split_gain must be a fraction .*got True"),
    ],
)
def test_elasticity_config_rejects_bad_values(field: str, value: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        ElasticityConfig(**{field: value})


def test_elasticity_boundaries_are_accepted() -> None:
    cfg = ElasticityConfig(
        overload_reaction_factor=0, low_watermark=1, underload_reaction_factor=1.0,
        peak_reset_factor=1, cooldown=0, min_spus=3, max_spus=3, min_split_gain=0,
    )
    assert cfg.min_spus == cfg.max_spus == 3


def test_min_spus_above_max_spus_says_how_to_fix_it() -> None:
    with pytest.raises(ConfigError, match=r"min_spus \(4\) is greater than max_spus \(2\); raise max_spus or lower min_spus"):
        ElasticityConfig(min_spus=4, max_spus=2)


# ------------------------------------------------------------------ JobConfig
@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("message_timeout", 0, r"JobConfig\.message_timeout must be a number > 0, got 0"),
        ("tick_interval", -0.01, r"JobConfig\.tick_interval must be a number > 0, got -0\.01"),
        ("pe_idle_timeout", 0, r"JobConfig\.pe_idle_timeout must be a number > 0 or None \(never\), got 0"),
        ("max_spout_pending", 0, r"JobConfig\.max_spout_pending must be a whole number >= 1, got 0"),
        ("batch_size", 1.5, r"JobConfig\.batch_size must be a whole number >= 1, got 1\.5"),
        ("max_workers", True, r"JobConfig\.max_workers must be a whole number >= 1, got True"),
        ("max_retries", -1, r"JobConfig\.max_retries must be a whole number >= 0, got -1"),
        ("acking", "yes", r"JobConfig\.acking must be true or false, got 'yes'"),
        ("metrics_port", 70000, r"JobConfig\.metrics_port must be a port 0-65535 or None, got 70000"),
        ("metrics_port", "9100", r"JobConfig\.metrics_port must be a port 0-65535 or None, got '9100'"),
        ("guarantee", "exactly-once", r"JobConfig\.guarantee must be one of exactly_once, at_least_once, none, "
                                      r"got 'exactly-once'"),
        ("checkpoint_interval", 0, r"JobConfig\.checkpoint_interval must be a number > 0, got 0"),
        ("checkpoint_timeout", -1, r"JobConfig\.checkpoint_timeout must be a number > 0, got -1"),
        ("fresh_start", "yes", r"JobConfig\.fresh_start must be true or false, got 'yes'"),
        ("restore_from", -3, r"JobConfig\.restore_from must be a whole number >= 1, got -3"),
        ("retained_checkpoints", 0, r"JobConfig\.retained_checkpoints must be a whole number >= 1, got 0"),
        ("tolerable_checkpoint_failures", -1,
         r"JobConfig\.tolerable_checkpoint_failures must be a whole number >= 0, got -1"),
        ("snapshot_slice_keys", 0, r"JobConfig\.snapshot_slice_keys must be a whole number >= 1, got 0"),
        ("checkpoint_min_free_bytes", 1.5, r"JobConfig\.checkpoint_min_free_bytes must be a whole number >= 0, got 1\.5"),
    ],
)
def test_job_config_rejects_bad_values(field: str, value: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        JobConfig(**{field: value})


def test_job_config_accepts_none_where_it_means_never_and_converts_paths() -> None:
    cfg = JobConfig(pe_idle_timeout=None, metrics_port=None, max_retries=0, data_dir="out/data")  # type: ignore[arg-type]
    assert cfg.pe_idle_timeout is None and cfg.max_retries == 0
    assert cfg.data_dir == Path("out/data")


def test_replace_validates_the_new_values() -> None:
    cfg = JobConfig().replace(batch_size=16)
    assert cfg.batch_size == 16 and JobConfig().batch_size == 1024
    with pytest.raises(ConfigError, match=r"JobConfig\.batch_size must be a whole number >= 1, got 0"):
        cfg.replace(batch_size=0)


def test_nan_is_not_a_positive_number() -> None:
    with pytest.raises(ConfigError, match="message_timeout must be a number > 0"):
        JobConfig(message_timeout=math.nan)


# ---------------------------------------------------- environment overrides
def test_environment_overrides_are_parsed_by_field_type() -> None:
    cfg = JobConfig.load(
        environ={
            "ESAULT_MESSAGE_TIMEOUT": "12.5",
            "ESAULT_ACKING": "off",
            "ESAULT_MAX_RETRIES": "7",
            "ESAULT_PE_IDLE_TIMEOUT": "none",
            "ESAULT_METRICS_PORT": "9100",
            "ESAULT_METRICS_HOST": "0.0.0.0",
            "ESAULT_DATA_DIR": "/var/lib/esault",
            "UNRELATED": "x",
        }
    )
    assert cfg.message_timeout == 12.5
    assert cfg.acking is False
    assert cfg.max_retries == 7
    assert cfg.pe_idle_timeout is None
    assert cfg.metrics_port == 9100
    assert cfg.metrics_host == "0.0.0.0"
    assert cfg.data_dir == Path("/var/lib/esault")


@pytest.mark.parametrize("raw", ["1", "true", "YES", " on "])
def test_boolean_variables_accept_the_usual_spellings(raw: str) -> None:
    assert JobConfig.load(environ={"ESAULT_ACKING": raw}).acking is True


@pytest.mark.parametrize(
    ("var", "raw", "message"),
    [
        ("ESAULT_ACKING", "maybe", r"environment variable ESAULT_ACKING='maybe' is not a valid bool"),
        ("ESAULT_MAX_WORKERS", "two", r"environment variable ESAULT_MAX_WORKERS='two' is not a valid int"),
        ("ESAULT_MAX_RETRIES", "2.5", r"environment variable ESAULT_MAX_RETRIES='2\.5' is not a valid int"),
        ("ESAULT_MESSAGE_TIMEOUT", "soon", r"environment variable ESAULT_MESSAGE_TIMEOUT='soon' is not a valid float"),
        ("ESAULT_BATCH_SIZE", "0", r"JobConfig\.batch_size must be a whole number >= 1, got 0"),
    ],
)
def test_bad_environment_values_name_the_variable(var: str, raw: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        JobConfig.load(environ={var: raw})


def test_environ_argument_replaces_the_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ESAULT_BATCH_SIZE", "7")
    assert JobConfig.load().batch_size == 7
    assert JobConfig.load(environ={}).batch_size == 1024


def test_unknown_keyword_arguments_list_the_valid_settings() -> None:
    with pytest.raises(ConfigError, match=r"arguments: unknown setting\(s\) batchsize \(did you mean batch_size\?\); valid settings are: acking, batch_delay, batch_size"):
        JobConfig.load(environ={}, batchsize=5)


# ------------------------------------------------------------------ TOML files
def test_precedence_is_argument_then_environment_then_file_then_default(tmp_path: Path) -> None:
    path = tmp_path / "job.toml"
    path.write_text("[job]\nbatch_size = 10\nmax_workers = 3\nmessage_timeout = 5.0\n", encoding="utf-8")
    cfg = JobConfig.load(path, environ={"ESAULT_MAX_WORKERS": "4", "ESAULT_MESSAGE_TIMEOUT": "6"}, message_timeout=7.0)
    assert cfg.batch_size == 10  # file
    assert cfg.max_workers == 4  # environment beats file
    assert cfg.message_timeout == 7.0  # argument beats environment
    assert cfg.tick_interval == 0.01  # default


def test_a_file_without_a_job_table_is_read_as_top_level_settings(tmp_path: Path) -> None:
    path = tmp_path / "job.toml"
    path.write_text('acking = false\ndata_dir = "d"\n', encoding="utf-8")
    cfg = JobConfig.load(str(path), environ={})
    assert cfg.acking is False and cfg.data_dir == Path("d")


def test_a_missing_file_is_reported(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"config file .*nope\.toml does not exist; pass an existing TOML file"):
        JobConfig.load(tmp_path / "nope.toml", environ={})


def test_invalid_toml_is_reported_with_the_parser_position(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text("[job\nbatch_size = 1\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"config file .*bad\.toml is not valid TOML: .*line 1"):
        JobConfig.load(path, environ={})


def test_unknown_settings_in_a_file_name_the_file_and_the_valid_settings(tmp_path: Path) -> None:
    path = tmp_path / "job.toml"
    path.write_text("[job]\nbatch_size = 8\nmax_worker = 2\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"config file .*job\.toml: unknown setting\(s\) max_worker \(did you mean max_workers\?\); valid settings are: .*max_workers"):
        JobConfig.load(path, environ={})


def test_a_job_key_that_is_not_a_table_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "job.toml"
    path.write_text("job = 5\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"config file .*job\.toml: \[job\] must be a table of settings"):
        JobConfig.load(path, environ={})


def test_badly_typed_file_values_are_config_errors(tmp_path: Path) -> None:
    path = tmp_path / "job.toml"
    path.write_text("[job]\ndata_dir = 5\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"config file .*job\.toml: JobConfig\.data_dir must be a path, got 5"):
        JobConfig.load(path, environ={})
    path.write_text('[job]\nmax_workers = "two"\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"JobConfig\.max_workers must be a whole number >= 1, got 'two'"):
        JobConfig.load(path, environ={})


def test_a_topologys_defaults_sit_below_files_environment_and_arguments(tmp_path: Path) -> None:
    from esault.config import JobConfig

    defaults = {"message_timeout": 120.0, "batch_size": 7, "max_retries": 9}
    cfg = JobConfig.load(environ={"ESAULT_BATCH_SIZE": "11"}, defaults=defaults, max_retries=1)
    assert (cfg.message_timeout, cfg.batch_size, cfg.max_retries) == (120.0, 11, 1)
    with pytest.raises(ConfigError, match="the topology's JOB_DEFAULTS: unknown setting"):
        JobConfig.load(environ={}, defaults={"nope": 1})


def test_guarantee_none_turns_tracking_off_and_exactly_once_is_the_default() -> None:
    assert JobConfig().guarantee == "exactly_once" and JobConfig().acking is True
    assert JobConfig(guarantee="none").acking is False
    assert JobConfig.load(environ={"ESAULT_GUARANTEE": "at_least_once"}).guarantee == "at_least_once"


# ------------------------------------------------- nothing is ignored silently
def test_a_misspelt_setting_gets_a_close_match() -> None:
    with pytest.raises(ConfigError, match=r"unknown setting\(s\) max_retry \(did you mean max_retries\?\); valid settings"):
        JobConfig.load(environ={}, max_retry=5)


def test_keys_outside_the_job_table_are_refused_not_ignored(tmp_path: Path) -> None:
    path = tmp_path / "job.toml"
    path.write_text("batch_size = 8\n[job]\nmax_retries = 2\n[elasticity]\nmax_spus = 3\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"job\.toml: 'batch_size', 'elasticity' outside the \[job\] table would be "
                                          r"ignored; esault reads only \[job\]"):
        JobConfig.load(path, environ={})


def test_a_table_inside_the_job_table_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "job.toml"
    path.write_text("[job]\nmax_retries = 2\n[job.elasticity]\nmax_spus = 3\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"\[job\] holds table\(s\) 'elasticity', which esault would ignore; it "
                                          r"reads plain settings, in \[job\] or at the top level"):
        JobConfig.load(path, environ={})
    path.write_text("max_retries = 2\n[elasticity]\nmax_spus = 3\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"the file holds table\(s\) 'elasticity', which esault would ignore"):
        JobConfig.load(path, environ={})


def test_an_unknown_esault_variable_is_named_with_a_close_match() -> None:
    with pytest.raises(ConfigError, match=r"unknown environment variable\(s\) ESAULT_BATCHSIZE \(did you mean "
                                          r"ESAULT_BATCH_SIZE\?\); esault would ignore them.*"
                                          r"Valid ESAULT_\* variables are: ESAULT_ACKING, ESAULT_API_TOKEN"):
        JobConfig.load(environ={"ESAULT_BATCHSIZE": "10"})


def test_variables_read_outside_jobconfig_are_known_and_others_are_left_alone() -> None:
    environ = {"ESAULT_SECRET_KEY": "k", "ESAULT_SPARK_MASTER": "local[1]", "ESAULT_RUNTIME_DIR": "/tmp",
               "HOME": "/root", "NOT_ESAULT_X": "1", "ESAULT_MAX_SPOUT_ERRORS": "5"}
    assert JobConfig.load(environ=environ).max_spout_errors == 5


def test_max_spout_errors_must_be_at_least_one() -> None:
    with pytest.raises(ConfigError, match=r"JobConfig\.max_spout_errors must be a whole number >= 1, got 0"):
        JobConfig(max_spout_errors=0)


def test_the_kafka_examples_broker_variable_is_known_not_refused() -> None:
    """examples/kafka_clicks.py documents ESAULT_KAFKA_BOOTSTRAP; `esault run` refused it as unknown."""
    assert JobConfig.load(environ={"ESAULT_KAFKA_BOOTSTRAP": "broker:9092"}) == JobConfig.load(environ={})
