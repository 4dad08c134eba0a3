"""The llama.cpp flags are declared once (crawler/cli/_llama_opts.py): every command that takes
one spells it, documents it, bounds it and parses it the same way (in-process, through the
commands' own parsers: typer's vendored click, reached through typer's public names)."""

from __future__ import annotations

from typing import Any

import pytest
import typer

from crawler.cli import register

# Each command's required arguments, so only the flag under test varies.
COMMANDS = {
    "search": ["--vram", "24"],
    "estimate": ["model.gguf", "--ctx", "4096"],
    "check-log": ["server.log"],
}
# flag (long name) -> (the commands that take it, its spellings, good values, a refused value)
FLAGS: dict[str, tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...], str | None]] = {
    "--ctx": (("search", "estimate"), ("--ctx", "-c"), ("4096", "256k", "1M"), "0"),
    "--cache-type-k": (("search", "estimate"), ("--cache-type-k", "-ctk"), ("q8_0",), None),
    "--cache-type-v": (("search", "estimate"), ("--cache-type-v", "-ctv"), ("q4_0",), None),
    "--flash-attn": (("search", "estimate"), ("--flash-attn", "-fa"), ("on", "off", "auto"), None),
    "--parallel": (("search", "estimate"), ("--parallel", "-np"), ("-1", "1", "4"), "-2"),
    "--ubatch-size": (("search", "estimate"), ("--ubatch-size", "-ub", "--ubatch"), ("256",), "0"),
    "--spec-draft-n-max": (("search", "estimate"), ("--spec-draft-n-max",), ("0", "5"), "-1"),
    "--cpu-moe": (("search", "estimate", "check-log"), ("--cpu-moe",), (), None),
    "--n-cpu-moe": (("search", "estimate", "check-log"), ("--n-cpu-moe",), ("0", "12"), "-1"),
    "--n-gpu-layers": (
        ("search", "estimate"),
        ("--n-gpu-layers", "-ngl", "--gpu-layers"),
        ("20", "auto", "all"),
        None,
    ),
    "--tensor-split": (("search", "estimate"), ("--tensor-split", "-ts"), ("3,1",), None),
    "--gpu": (("search", "estimate"), ("--gpu",), ("rtx 4090",), None),
    "--vram": (("search", "estimate"), ("--vram",), ("24", "24G", "24576MiB"), "nope"),
    "--headroom": (("search", "estimate"), ("--headroom",), ("0", "1.5"), "-1"),
}

# Options that share a name with a shared flag but mean something else: check-log's --gpu is the
# one GPU the logged run used (its speed is compared), not a budget of one or several GPUs.
OTHER_MEANING = {"--gpu": {"check-log"}}


def _commands() -> dict[str, Any]:
    group: Any = typer.main.get_command(register(None))
    return {name: group.commands[name] for name in COMMANDS}


def _option(command: Any, long: str) -> Any:
    (option,) = [p for p in command.params if p.param_type_name == "option" and long in p.opts]
    return option


def _parse(command: Any, name: str, args: list[str]) -> dict[str, Any]:
    base = list(COMMANDS[name])
    if "--vram" in args and "--vram" in base:  # search's budget is the flag under test
        base = []
    with command.make_context(name, [*base, *args]) as ctx:
        return dict(ctx.params)


def test_every_shared_flag_is_listed_for_every_command_that_takes_it():
    commands = _commands()
    for long, (takers, *_rest) in FLAGS.items():
        having = {name for name, cmd in commands.items() for p in cmd.params if long in p.opts}
        assert having - OTHER_MEANING.get(long, set()) == set(takers), long


@pytest.mark.parametrize("long", sorted(FLAGS))
def test_a_shared_flag_has_one_spelling_help_and_bound(long: str):
    commands = _commands()
    takers, spellings, _, _ = FLAGS[long]
    options = [_option(commands[name], long) for name in takers]
    for option in options:
        assert set(option.opts) == set(spellings)
        assert option.help == options[0].help and option.help
        assert option.metavar == options[0].metavar
        assert option.multiple == options[0].multiple
        assert option.is_flag == options[0].is_flag
        assert (option.min, option.max) == (options[0].min, options[0].max)
        assert option.secondary_opts == options[0].secondary_opts


@pytest.mark.parametrize("long", sorted(FLAGS))
def test_a_shared_flag_parses_the_same_in_every_command(long: str):
    commands = _commands()
    takers, spellings, values, refused = FLAGS[long]
    for spelling in spellings:
        for value in values or (None,):
            args = [spelling] if value is None else [spelling, value]
            parsed = []
            for name in takers:
                option = _option(commands[name], long)
                assert option.name is not None
                parsed.append(_parse(commands[name], name, args)[option.name])
            assert len(set(map(repr, parsed))) == 1, (spelling, value, parsed)
            assert parsed[0] is not None
    if refused is not None:
        for name in takers:
            with pytest.raises(typer.BadParameter):
                _parse(commands[name], name, [spellings[0], refused])


def test_a_value_given_twice_ways_is_the_same_value():
    """The short and long spellings are one option: the last one given wins, as in llama.cpp."""
    commands = _commands()
    params = _parse(commands["estimate"], "estimate", ["-np", "2", "--parallel", "3"])
    assert params["parallel"] == 3
