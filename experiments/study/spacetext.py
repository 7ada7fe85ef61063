"""The `--space` flag of `hcjax run`: a hyperparameter as text, NAME=LOW:HIGH[:log][:int][:default=V]
or NAME=A,B,C[:default=V] for a categorical, parsed into a study file's space entry."""
from __future__ import annotations


def parse_option(text: str) -> int | float | str:
    """One option of a `--space` categorical: an int or float when it parses as one, else the string."""
    for number in (int, float):
        try:
            return number(text)
        except ValueError:
            pass
    return text


def check_flags_once(text: str, flags: list[str], form: str) -> None:
    """ValueError naming a `--space` flag given twice (e.g. `:default=1:default=2`)."""
    keys = [f.partition("=")[0] for f in flags]
    twice = sorted({k for k in keys if keys.count(k) > 1})
    if twice:
        raise ValueError(f"--space {text!r}: {', '.join(twice)} given twice; give each flag once ({form})")


def parse_choice(text: str, name: str, parts: list[str]) -> dict:
    """`--space` entry NAME=A,B,C[:default=V] (parts: "A,B,C" and the flags) -> a
    categorical entry {name, options[, default]} (options parsed by `parse_option`)."""
    form = "NAME=A,B,C[:default=V]"
    options = [parse_option(o) for o in parts[0].split(",")]
    if any(o == "" for o in options):
        raise ValueError(f"--space {text!r}: an option is empty ({form})")
    entry = {"name": name, "options": options}
    check_flags_once(text, parts[1:], form)
    for flag in parts[1:]:
        if not flag.startswith("default="):
            raise ValueError(f"--space {text!r}: unknown flag {flag!r}; a categorical allows only default=V ({form})")
        entry["default"] = parse_option(flag[len("default="):])
    return entry


def parse_hyperparameter(text: str) -> dict:
    """`--space` entry NAME=LOW:HIGH[:log][:int][:default=V], or NAME=A,B,C[:default=V]
    for a categorical (a comma means options) -> Hyperparameter fields."""
    form = "NAME=LOW:HIGH[:log][:int][:default=V] or NAME=A,B,C[:default=V]"
    name, eq, rest = text.partition("=")
    parts = rest.split(":")
    if eq and name and "," in parts[0]:
        return parse_choice(text, name, parts)
    if not eq or not name or len(parts) < 2:
        raise ValueError(f"--space {text!r}: expected {form}")
    try:
        entry = {"name": name, "low": float(parts[0]), "high": float(parts[1])}
    except ValueError:
        raise ValueError(f"--space {text!r}: LOW and HIGH must be numbers ({form})") from None
    check_flags_once(text, parts[2:], form)
    for flag in parts[2:]:
        if flag == "log":
            entry["scale"] = "log"
        elif flag == "int":
            entry["integer"] = True
        elif flag.startswith("default="):
            try:
                entry["default"] = float(flag[len("default="):])
            except ValueError:
                raise ValueError(f"--space {text!r}: default must be a number") from None
        else:
            raise ValueError(f"--space {text!r}: unknown flag {flag!r}; allowed: log, int, default=V ({form})")
    return entry
