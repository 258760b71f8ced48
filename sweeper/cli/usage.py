"""What a mistyped command line is told: one `error:` line and exit 2 (`GuardedGroup`), never
Click's usage block. An option the command does not take gets the command's own options
that are really close to it (Click suggested `--retrain` for `--radii`) and the commands that
do take it (`--radii` is an option of `sweeper envelope`, ...)."""

from __future__ import annotations

import difflib

# typer carries its own Click (typer._click): its errors and commands are the ones raised here
from typer._click import Command, Context
from typer._click.exceptions import NoSuchOption, UsageError

CLOSE = 0.75  # how alike (difflib's ratio) a suggested option must be: --radi, not --retrain


def usage_line(e: UsageError) -> str:
    """The one line of a usage error, saying where to read the command's options."""
    path = e.ctx.command_path if e.ctx is not None else "sweeper"
    if isinstance(e, NoSuchOption) and e.ctx is not None:
        return no_such_option(e, e.ctx, path)
    return f"{e.format_message()} (see `{path} -h`)"


def no_such_option(e: NoSuchOption, ctx: Context, path: str) -> str:
    name = e.option_name
    options = sorted({o for p in ctx.command.params for o in [*p.opts, *p.secondary_opts]})
    # compared without the leading dashes, which every option shares: with them, --radi was
    # "close" to --audit (ratio 0.77), without them it is not (0.67), while --radii stays (0.89)
    words = {o[2:]: o for o in options if o.startswith("--")}
    close = [words[w] for w in difflib.get_close_matches(name.lstrip("-"), list(words), 3, CLOSE)]
    line = f"`{path}` has no option {name}"
    if close:
        line += f"; did you mean {' or '.join(close)}?"
    root = ctx.find_root()
    elsewhere = [p for p in commands_taking(root.command, name, root.command_path) if p != path]
    if elsewhere:
        line += f"; {name} is an option of {', '.join(f'`{p}`' for p in elsewhere)}"
    return f"{line} (see `{path} -h`)"


def commands_taking(command: Command, name: str, path: str) -> list[str]:
    """The paths of the commands under `command` that take the option `name`."""
    found = [path] if any(name in [*p.opts, *p.secondary_opts] for p in command.params) else []
    for sub_name, sub in getattr(command, "commands", {}).items():
        found += commands_taking(sub, name, f"{path} {sub_name}")
    return found
