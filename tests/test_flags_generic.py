"""experiment.cli.define_dataclass_flags: a dataclass's fields as absl flags, checked on a
FlagValues of its own (the run scripts' flags are all defined by it)."""

import dataclasses

import pytest
from absl import flags

from experiment.cli import define_dataclass_flags


@dataclasses.dataclass(frozen=True)
class Toy:
    count: int = 3
    rate: float = 0.5
    on: bool = True
    name: str = "toy"
    mode: str = "fast"
    taus: tuple[float, ...] = (0.0, 0.025, 0.1234567891)
    steps: tuple[int, ...] = (10, 20)
    hidden: int = 7  # no help text: no flag


HELPS = {"mode": "How fast.", "count": "How many.", "rate": "How much.", "on": "Whether.",
         "name": "What.", "taus": "Thresholds.", "steps": "When."}
CHOICES = {"mode": ("fast", "slow")}


def toy_flags(defaults=Toy(), **kwargs) -> flags.FlagValues:
    fv = flags.FlagValues()
    define_dataclass_flags(defaults, HELPS, CHOICES, flag_values=fv, **kwargs)
    return fv


def test_types_defaults_and_help_texts_follow_the_fields():
    fv = toy_flags()
    assert list(fv) == list(HELPS)  # in the mapping's order; `hidden` has none
    assert {name: fv[name].flag_type() for name in HELPS} == {
        "mode": "string enum", "count": "int", "rate": "float", "on": "bool", "name": "string",
        "taus": "comma separated list of strings", "steps": "comma separated list of strings"}
    fv(["prog"])
    assert (fv.count, fv.rate, fv.on, fv.name, fv.mode) == (3, 0.5, True, "toy", "fast")
    assert fv.taus == ["0", "0.025", "0.1234567891"]  # short where it reads back the same
    assert fv.steps == ["10", "20"]
    assert {name: fv[name].help for name in HELPS} == {**HELPS, "mode": "<fast|slow>: How fast."}
    assert fv.flags_by_module_dict() == {__name__: [fv[name] for name in HELPS]}


def test_defaults_come_from_the_instance_and_values_parse_by_type():
    fv = toy_flags(Toy(count=5, on=False, mode="slow", steps=()))
    fv(["prog", "--rate=2", "--noon", "--taus=1,2"])
    assert (fv.count, fv.rate, fv.on, fv.mode, fv.taus, fv.steps) == (5, 2.0, False, "slow",
                                                                      ["1", "2"], [])
    assert fv["count"].default == 5 and not fv["count"].present and fv["rate"].present


def test_enum_takes_only_its_choices_and_a_field_without_help_has_no_flag():
    fv = toy_flags()
    assert fv["mode"].parser.enum_values == ["fast", "slow"]
    with pytest.raises(flags.IllegalFlagValueError):
        fv(["prog", "--mode=medium"])
    with pytest.raises(flags.UnrecognizedFlagError):
        toy_flags()(["prog", "--hidden=1"])


def test_module_name_groups_the_flags_in_help():
    fv = toy_flags(module_name="toy settings")
    assert [f.name for f in fv.flags_by_module_dict()["toy settings"]] == list(HELPS)
    assert "toy settings:" in fv.module_help("toy settings")


def test_a_help_text_of_no_field_or_a_field_of_no_flag_type_is_an_error():
    with pytest.raises(ValueError, match="no field 'missing'"):
        define_dataclass_flags(Toy(), {"missing": "?"}, flag_values=flags.FlagValues())

    @dataclasses.dataclass
    class Odd:
        table: dict = dataclasses.field(default_factory=dict)

    with pytest.raises(TypeError, match="--table"):
        define_dataclass_flags(Odd(), {"table": "?"}, flag_values=flags.FlagValues())
