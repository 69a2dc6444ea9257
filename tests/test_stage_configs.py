"""One set of defaults per setting: every stage's config built from its command line (`eagle3nb STAGE ...`, through
`cli.command_config`, what the command runs with) and from the main job (`settings.pipeline_config`, what
`eagle3nb run` runs with), compared field by field."""
from dataclasses import asdict, fields
import pytest
from eagle3nb.cli import command_config
from eagle3nb.core import STAGES, Run, write_json
from eagle3nb.settings import SECTION, main_job_differs, pipeline_config

def argv(stage:str, run, *flags) -> list:
    "A stage command's line on `run` (prepare takes its inputs as arguments)."
    c = pipeline_config(run=str(run))
    return [*(map(str, c.data.inputs) if stage == "prepare" else ()), "--run", str(run), *flags]

def differences(a, b) -> dict:
    "`{field: (a's, b's)}` where two configs of one class differ."
    da, db = asdict(a), asdict(b)
    return {f.name: (da[f.name], db[f.name]) for f in fields(a) if da[f.name] != db[f.name]}

@pytest.mark.parametrize("size", ["tiny", "small", "large"])
def test_a_stage_command_on_the_main_jobs_run_takes_its_settings(tmp_path, size):
    main = pipeline_config(size=size, run=str(tmp_path))
    write_json(Run(tmp_path).settings, asdict(main))          # what `eagle3nb run` records before its first stage
    for stage in STAGES:
        cli = command_config(stage, argv(stage, tmp_path))
        assert type(cli) is type(getattr(main, SECTION[stage]))
        assert differences(cli, getattr(main, SECTION[stage])) == {}, stage

FLAGS = {"prepare": ("limit", "7", 7), "generate": ("max_new_tokens", "99", 99),
         "validate": ("drop_truncated", "true", True), "context": ("n_prompts", "5", 5),
         "capture": ("shard_tokens", "4096", 4096), "train": ("epochs", "3", 3), "evaluate": ("ks", "1,2", [1, 2]),
         "export": ("k", "2", 2)}

@pytest.mark.parametrize("stage", STAGES)
def test_a_flag_and_a_set_change_the_same_setting(tmp_path, stage):
    write_json(Run(tmp_path).settings, asdict(pipeline_config(size="tiny", run=str(tmp_path))))
    key, text, value = FLAGS[stage]
    cli = command_config(stage, argv(stage, tmp_path, f"--{key}", text))          # eagle3nb STAGE --key text
    main = pipeline_config(size="tiny", run=str(tmp_path), **{SECTION[stage]: {key: value}})   # --set section.key=
    assert getattr(cli, key) == value
    assert differences(cli, getattr(main, SECTION[stage])) == {}

@pytest.mark.parametrize("stage", STAGES)
def test_a_run_the_main_job_never_saw_uses_the_stage_defaults_and_says_where_they_differ(tmp_path, stage, capsys):
    cli = command_config(stage, argv(stage, tmp_path))
    main = getattr(pipeline_config(run=str(tmp_path)), SECTION[stage])   # `eagle3nb run`, size small
    assert differences(cli, type(cli)()) == {}                            # the dataclass's own defaults
    said = capsys.readouterr().out
    differ = differences(cli, main)
    assert set(differ) == set(main_job_differs(type(cli), SECTION[stage]))   # every difference is named...
    for k, (here, there) in differ.items(): assert f"{k}={there!r} (here {here!r})" in said   # ...with both values
