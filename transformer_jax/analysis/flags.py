"""The command-line flags the analysis commands share, defined in one place.

--workdir and --step name the trained run read, --input and --target the text fed to it, --out
the PNG written. Each command defines its own flags and calls define_common_flags for these, so
a shared flag has the same type, default (None) and help in every command; a command rewords
the help where the flag means something narrower there (e.g. amy's optional --workdir).
"""

from collections.abc import Sequence

from absl import flags

# name -> (the absl DEFINE function, the standard help text).
_COMMON = {
    "workdir": (flags.DEFINE_string, "A run directory written by training."),
    "input": (flags.DEFINE_string, "The input text (source, prompt or text to classify)."),
    "target": (flags.DEFINE_string, "Encoder-decoder: the target the decoder is fed."),
    "step": (flags.DEFINE_integer, "Checkpoint step to load; default the latest."),
    "out": (flags.DEFINE_string, "Output PNG path."),
}


def define_common_flags(
    *names: str,
    required: Sequence[str] = ("out",),
    flag_values: flags.FlagValues = flags.FLAGS,
    **help_texts: str,
) -> None:
    """Defines the shared flags `names` (default None) and marks `required` as required.

    help_texts: flag name -> help replacing the standard one, e.g. workdir="A trained run.".
    """
    unknown = sorted(set(names) - set(_COMMON))
    if unknown:
        raise ValueError(f"flags {unknown} are not shared flags; valid: {sorted(_COMMON)}")
    undefined = sorted((set(required) | set(help_texts)) - set(names))
    if undefined:
        raise ValueError(f"flags {undefined} are required or reworded but not in {list(names)}")
    for name in names:
        define, standard_help = _COMMON[name]
        define(name, None, help_texts.get(name, standard_help), flag_values=flag_values)
    flags.mark_flags_as_required(list(required), flag_values=flag_values)


def define_text_input_flags(flag_values: flags.FlagValues = flags.FLAGS, **help_texts: str) -> None:
    """The flags of a command that feeds one text to a trained run (attention_maps, ponder)."""
    define_common_flags(
        "workdir",
        "input",
        "target",
        "step",
        "out",
        required=("workdir", "input", "out"),
        flag_values=flag_values,
        **help_texts,
    )
