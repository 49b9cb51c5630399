"""The one ``key=value`` convention of eval, export, report, plot and tune (rltool/cli/args.py):
types, lists, quoted paths, one-line refusals, the old flags, and the same help layout
everywhere."""

import re
from dataclasses import dataclass, field

import pytest

from rltool.cli import COMMANDS, main
from rltool.cli.args import Option, option_tables, options, parse
from rltool.cli.eval import EvalArgs
from rltool.cli.plot import PlotArgs
from rltool.cli.report import ReportArgs
from rltool.cli.tune import Options as TuneArgs
from rltool.cli.tune import parse as tune_parse
from rltool.errors import EXIT_USAGE, UserError
from rltool.sweeps.tune import study as st


@dataclass
class Every:
    """One option of each kind the parser reads."""

    n: int = field(default=1, metadata={"help": "an int"})
    x: float | None = field(default=None, metadata={"help": "a float or null"})
    on: bool = field(default=False, metadata={"help": "a bool"})
    path: str | None = field(default=None, metadata={"help": "a string"})
    keys: list[str] | None = field(default=None, metadata={"help": "a list"})
    ids: list[int] = field(default_factory=list, metadata={"help": "ints"})
    fmt: str = field(default="a", metadata={"help": "a choice", "choices": ("a", "b")})


def one(*argv: str) -> Every:
    return parse(Every, list(argv), "test")


@pytest.mark.parametrize(
    ("arg", "key", "want"),
    [
        ("n=3", "n", 3),
        ("n=1_000", "n", 1000),
        ("x=450", "x", 450.0),
        ("x=4.5e2", "x", 450.0),
        ("x=null", "x", None),
        ("on=true", "on", True),
        ("on=False", "on", False),
        ("path=null", "path", None),
        ("path=450", "path", "450"),  # a string option keeps the text: not 450 the int
        ("path=1e3", "path", "1e3"),
        ("path=runs/a,b", "path", "runs/a,b"),  # not a list: a string option takes no list
        ("keys=[env,policy]", "keys", ["env", "policy"]),
        ("keys=env,policy", "keys", ["env", "policy"]),  # Hydra's a,b: the same list
        ("keys=env", "keys", ["env"]),
        ("keys=[]", "keys", []),
        ("keys=[true,False]", "keys", ["True", "False"]),  # a bool as a config writes it
        ("keys=", "keys", []),
        ("ids=[1,2]", "ids", [1, 2]),
        ("ids=range(100,103)", "ids", [100, 101, 102]),
        ("fmt=b", "fmt", "b"),
    ],
)
def test_each_type_parses_as_train_reads_its_overrides(arg, key, want):
    assert getattr(one(arg), key) == want


@pytest.mark.parametrize(
    "arg",
    [
        "path=runs/ä b/run",  # run="runs/ä b/run" as the shell passes it: no quotes left
        'path="runs/ä b/run"',  # the quotes kept ('run="runs/ä b/run"' in the shell)
        "path='runs/ä b/run'",
        "path=  runs/ä b/run ",
    ],
)
def test_paths_with_spaces_and_non_ascii_letters(arg):
    assert one(arg).path == "runs/ä b/run"


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["n=many"], "n='many' is invalid: expected an integer (n=<int>)"),
        (["n=1.5"], "n='1.5' is invalid: expected an integer"),
        (["n=true"], "expected an integer"),
        (["x=abc"], "x='abc' is invalid: expected a number (x=<float>)"),
        (["on=maybe"], "on='maybe' is invalid: expected true or false (on=<bool>)"),
        (["n=null"], "n=null is invalid: expected an integer"),
        (["ids=[a]"], "ids='[a]' is invalid: expected a list of integers"),
        (["fmt=c"], "fmt='c' is invalid: choose one of a, b"),
        (["x=a(b"], "x='a(b' does not parse"),
        (["nn=3"], "unknown option 'nn' (did you mean n=?): those of rltool test are n, x, on"),
        (["folder"], "'folder' is not an option: rltool test takes key=value"),
        (["--n", "3"], "--n is no longer a flag: write n=3"),
        (["--fmt=b"], "--fmt is no longer a flag: write fmt=b"),
        (["--keys"], "--keys is no longer a flag: write keys=<value>"),
        (["-v"], "'-v' is not an option: rltool test takes key=value"),
    ],
)
def test_bad_input_is_one_user_error_naming_the_key(args, words):
    with pytest.raises(UserError) as e:
        one(*args)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_the_last_value_wins():
    assert one("n=2", "n=3").n == 3


def test_folders_are_the_bare_words_of_report_and_plot():
    a = parse(ReportArgs, ["m/a", "by=policy", "./lr=0.1", "m/x/lr=0.2", "goal=450"], "report")
    assert a.folders == ["m/a", "./lr=0.1", "m/x/lr=0.2"] and a.by == ["policy"]
    assert a.goal == 450.0 and a.format == "table"
    assert parse(ReportArgs, ["a", "folders=[b,c]"], "report").folders == ["a", "b", "c"]
    p = parse(PlotArgs, ["runs/ä b", "out=out dir/c.png", "by=task", "curves=[policy,env]"], "plot")
    assert p.folders == ["runs/ä b"] and p.out == "out dir/c.png"
    assert p.by == ["task"] and p.curves == ["policy", "env"]
    with pytest.raises(UserError, match="a folder whose name holds '=' is written ./<name>"):
        parse(ReportArgs, ["lr=0.1"], "report")


def test_tune_keeps_its_own_keys_and_passes_the_rest_to_train():
    opts, rest = tune_parse(
        ["env=cartpole", "search=s", "trials=4", "+x=1", "hydra/launcher=joblib", "seeds=2"]
    )
    assert (opts.search, opts.trials, opts.seeds) == ("s", 4, 2)
    assert rest == ["env=cartpole", "+x=1", "hydra/launcher=joblib"]
    assert opts.search_seeds() == [st.SEARCH_SEED0, st.SEARCH_SEED0 + 1]  # today's defaults
    assert opts.population() == list(st.POPULATION)
    opts, _ = tune_parse(["search=s", "trials=1", "seed0=500", "population_seed0=7"])
    assert opts.search_seeds() == [500] and opts.population() == list(range(7, 27))


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["seed0=110"], "the search seeds 110 and the held-out population 100-119 share seed 110"),
        (["population_seeds=0"], "population_seeds=0 is invalid"),
        (["seed=3"], "a study sets the seeds itself"),
        (["--trials", "3"], "--trials is no longer a flag: write trials=3"),
        (["pruner=x"], "pruner='x' is invalid: choose one of median, halving, none"),
    ],
)
def test_tune_refusals(args, words):
    with pytest.raises(UserError, match=re.escape(words)):
        tune_parse(["search=s", "trials=1", *args])


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["eval", "run=x", "episode=3"], "unknown option 'episode' (did you mean episodes=?)"),
        (["eval", "run=x", "episodes=many"], "episodes='many' is invalid: expected an integer"),
        (["report", "a", "--by", "task,policy"], "--by is no longer a flag: write by=task,policy"),
        (["report", "a", "--format", "markdown"], "write format=markdown"),
        (["report", "a", "--goal", "450"], "write goal=450"),
        (["report", "a", "format=xml"], "format='xml' is invalid: choose one of table"),
        (["report", "a", "goal=high"], "goal='high' is invalid: expected a number"),
        (["report", "by=env"], "rltool report needs a folder"),
        (["plot", "a", "--out", "x.png"], "--out is no longer a flag: write out=x.png"),
        (["plot", "a", "curve=env"], "unknown option 'curve' (did you mean curves=?)"),
        (["tune", "--trials", "3"], "--trials is no longer a flag: write trials=3"),
    ],
)
def test_the_commands_refuse_in_one_line_exit_2(argv, words, capsys):
    assert main(argv) == EXIT_USAGE
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and words in err and "usage:" not in err, err
    assert err.startswith(f"rltool {argv[0]}: error: ")


def test_report_reads_a_path_with_spaces_and_non_ascii_letters(tmp_path, capsys):
    folder = tmp_path / "runs ä" / "sweep b"
    folder.mkdir(parents=True)
    assert main(["report", str(folder), "by=policy"]) == EXIT_USAGE  # no run in it
    assert str(folder) in capsys.readouterr().err


HELP_LINE = re.compile(r"  (\w+)=<([^>]+)> \((default: .*|required)\) +\S")


@pytest.mark.parametrize("command", ["eval", "export", "report", "plot", "tune"])
def test_help_lists_every_option_the_same_way(command, capsys):
    assert main([command, "--help"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].startswith(f"usage: rltool {command} ")
    start = lines.index("options (key=value, read as rltool train reads its overrides):")
    table = option_tables()[command]
    rows = lines[start + 1 :]
    assert len(rows) == len(table)
    for row, opt in zip(rows, table, strict=True):
        if opt.positional:
            assert row.startswith(f"  <{opt.name}> ...")
            continue
        m = HELP_LINE.match(row)
        assert m and m.group(1) == opt.name and m.group(2) == opt.type, row
        assert row.rstrip().endswith(opt.help)
    assert len({row.index(opt.help) for row, opt in zip(rows, table, strict=True)}) == 1


def test_option_tables_describe_every_command():
    tables = option_tables()
    assert set(tables) == {"eval", "export", "report", "plot", "tune"}
    assert all(isinstance(o, Option) and o.help for t in tables.values() for o in t)
    report = {o.name: o for o in tables["report"]}
    assert report["format"].type == "table|markdown|csv" and report["format"].default == "table"
    assert report["by"].type == "list[str]" and report["folders"].positional
    tune = {o.name: o for o in tables["tune"]}
    assert tune["seed0"].default == st.SEARCH_SEED0
    assert tune["population_seed0"].default == st.POPULATION[0]
    assert tune["population_seeds"].default == len(st.POPULATION)
    assert [o.name for o in options(EvalArgs)][:3] == ["run", "checkpoint", "episodes"]
    assert options(TuneArgs)[0].required and options(EvalArgs)[0].required


def test_the_dispatchers_help_uses_key_value_for_every_command():
    for name, (_, text) in COMMANDS.items():
        assert "=" in text, name
        assert not re.search(r"(^|\s)--\w", text), f"{name}: {text}"  # no --flag left
