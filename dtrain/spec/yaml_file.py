"""YAML files (a job file, config.yaml) read as one mapping (pure): one loader (no key given twice, a
number keeping the text it was written as), bounded in size and alias expansion, and YAML 1.1's other
number forms refused where a number is meant."""

from __future__ import annotations

import functools
from typing import Any, Mapping

from dtrain.errors import SpecError
from dtrain.names import WrittenFloat, WrittenInt, cut, plain, shown
from dtrain.numbers import NUMBER_WORD_RE, NumberWord, plain_numbers, yaml11_form
from dtrain.spec.fields import _keys


MAX_YAML_BYTES = 1 << 20  # a job file or config.yaml is a few hundred bytes; refuse a stray big file
# What a YAML file may hold once its aliases (*name) are expanded, counted as the characters of
# its strings plus one per other value: a file without aliases stays below its own size, while
# nine aliases of nine aliases of ... (a "billion laughs") would hold gigabytes.
MAX_YAML_EXPANDED = 2 * MAX_YAML_BYTES


@functools.lru_cache(maxsize=1)
def _loader():
    """PyYAML's safe loader, except that a mapping may not give a key twice (PyYAML keeps the last
    silently: a second `gpu:` would win unseen; YAML 1.2 requires unique keys) and that a number
    keeps the text it was written as where Python would write it back otherwise."""
    import yaml

    class Loader(yaml.SafeLoader):
        def construct_mapping(self, node, deep=False):
            if isinstance(node, yaml.MappingNode):
                seen: dict = {}
                for key_node, _ in node.value:
                    if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *base` then own keys: a merge overrides
                        continue
                    key = self.construct_object(key_node, deep=True)
                    try:
                        first = seen.setdefault(key, key_node)
                    except TypeError:  # unhashable: the base class names it
                        continue
                    if first is not key_node:
                        raise yaml.constructor.ConstructorError(
                            None, None, f"the key {cut(shown(key), 60)} is given twice (keep one): at line "
                            f"{first.start_mark.line + 1} and", key_node.start_mark)
            return super().construct_mapping(node, deep=deep)

        def construct_yaml_int(self, node):
            value = super().construct_yaml_int(node)
            # str() refuses past 4300 digits, which a hex number reaches in a few kilobytes
            as_python = value.bit_length() <= 4096 and str(value) == node.value
            return value if as_python else WrittenInt(value, node.value)

        def construct_yaml_float(self, node):
            value = super().construct_yaml_float(node)
            return value if str(value) == node.value else WrittenFloat(value, node.value)

        def construct_yaml_str(self, node):
            # JSON writes a character past U+FFFF as two escapes ("\ud83c\udf89", as `describe --json`
            # prints an emoji); YAML, a superset of JSON, means the one character, but PyYAML keeps
            # two lone surrogates, which the spec then refused as "not valid UTF-8 text".
            value = super().construct_yaml_str(node)
            if node.style is None and NUMBER_WORD_RE.fullmatch(value):  # unquoted 1e3: a number to YAML 1.2
                return NumberWord(value)
            if any("\ud800" <= c <= "\udfff" for c in value):
                try:
                    value = value.encode("utf-16-le", "surrogatepass").decode("utf-16-le")
                except UnicodeDecodeError:  # a lone one stays, and is refused where the value is read
                    pass
            return value

    Loader.add_constructor("tag:yaml.org,2002:int", Loader.construct_yaml_int)
    Loader.add_constructor("tag:yaml.org,2002:float", Loader.construct_yaml_float)
    Loader.add_constructor("tag:yaml.org,2002:str", Loader.construct_yaml_str)
    return Loader


_YAML11_FORMS = {"hexadecimal": "hexadecimal number (base 16)", "binary": "binary number (base 2)",
                 "octal": "octal number (a leading zero: base 8)", "sexagesimal": "sexagesimal number (base 60)",
                 "with _": "number with '_' between digits"}


def check_yaml_numbers(value: Any, source: str, key: str = "", leaf: str = "", *, fix_as: str = "{}: {}") -> None:
    """Every number in `value` (a YAML file's mapping, or its part at `key`) written in decimal:
    YAML 1.1's other forms (numbers.yaml11_form: 0x7000, 017, 0b1, 1:30, 1_000), which PyYAML takes and
    YAML 1.2 does not (it reads 017 as 17, has no 0b1 nor 1:30), are one SpecError line naming the
    key and the decimal. Only where a number is meant: command and env keep such text as typed."""
    if isinstance(value, Mapping):
        for k, v in value.items():
            check_yaml_numbers(v, source, f"{key}.{k}" if key else str(k), str(k), fix_as=fix_as)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            check_yaml_numbers(v, source, f"{key}[{i}]", leaf, fix_as=fix_as)
    elif (form := yaml11_form(value)) is not None:
        decimal, leaf = plain(value), cut(leaf, 60)
        fix = f"write {fix_as.format(leaf, decimal)}"
        if form == "octal":  # YAML 1.2 reads 017 as 17: which one was meant is not known
            fix = (f"write {fix_as.format(leaf, int(value.text.replace('_', ''), 10))} (without the leading zero), "
                   f"or {decimal} for the octal")
        raise SpecError(f"{source}: {cut(key, 80)}: {cut(value.text, 40)} is a YAML 1.1 {_YAML11_FORMS[form]}, read "
                        f"as {decimal}; numbers are taken in decimal digits only: {fix}")


def yaml_value(text: str, key: str, source: str, *, fix_as: str = "{}: {}") -> Any:
    """One value as a YAML file's `KEY: TEXT` reads it (a number, true, [a, b], None for nothing), checked
    as yaml_mapping and check_yaml_numbers check a file's; numbers plain. `source` names it in a refusal,
    `fix_as` how a key and its value are written there ('--set {}={}')."""
    if "\n" in text or "\r" in text:
        raise SpecError(f"{source}: give the value on one line (a list as [a, b])")
    data = yaml_mapping(f"{key}: {text}".encode(), source, f"{key}: VALUE")
    if list(data) != [key]:  # `x=1, y: 2` written in one value
        raise SpecError(f"{source}: {cut(shown(text), 60)} is not one value: quote it, e.g. {key}='\"...\"'")
    check_yaml_numbers(data, source, fix_as=fix_as)
    return plain_numbers(data[key])


def yaml_mapping(data: bytes, source: str, example: str) -> dict:
    """The top-level mapping of a YAML file's bytes; any problem is one SpecError line naming `source`.
    A number written otherwise than Python writes it (0.10, 017) is a WrittenInt or WrittenFloat:
    JobSpec.from_dict keeps its text where a field takes a string."""
    import yaml  # only the YAML doors need it

    if len(data) > MAX_YAML_BYTES:
        raise SpecError(f"{source} is larger than {MAX_YAML_BYTES} bytes, not a YAML file of a few fields; "
                        f"check the path")
    try:
        text = data.decode("utf-8")
        if "\0" in text:
            raise UnicodeDecodeError("utf-8", data, data.index(b"\0"), data.index(b"\0") + 1, "NUL byte")
    except UnicodeDecodeError as err:
        raise SpecError(f"{source} is not a text file (byte {err.start} is not UTF-8 text): give a YAML "
                        f"file such as '{example}'") from None
    try:
        loaded = yaml.load(text, Loader=_loader())  # noqa: S506 (a SafeLoader)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise SpecError(f"{source} is not valid YAML: {cut(err.problem or err.context)}{where}") from None
    except yaml.YAMLError as err:
        raise SpecError(f"{source} is not valid YAML: {cut(str(err).splitlines()[0])}") from None
    except RecursionError:
        raise SpecError(f"{source} nests its values too deeply to read: a job file is a few flat fields "
                        f"such as '{example}'") from None
    except (ValueError, TypeError, OverflowError) as err:  # YAML's own types refuse it: 2024-13-45, 5000 digits
        raise SpecError(f"{source} holds a value YAML cannot read ({cut(str(err))}): quote it "
                        f"to make it a string") from None
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise SpecError(f"{source} must hold a mapping of fields such as '{example}', not a {type(loaded).__name__}")
    sizes: dict[int, int] = {}
    for key in loaded:  # field by field, to name the one that contains itself
        if _expanded_size(loaded[key], sizes) is None:
            raise SpecError(f"{source}: the value of {_keys([key])} contains itself (a YAML alias *name inside "
                            f"its own &name): write the value out")
    if _expanded_size(loaded, sizes) > MAX_YAML_EXPANDED:
        raise SpecError(f"{source} holds more than {MAX_YAML_EXPANDED} characters of values once its aliases "
                        f"(*name) are expanded: write the values out instead of repeating aliases")
    return loaded


def _expanded_size(root, sizes: dict[int, int]) -> int | None:
    """The size of what YAML loaded with its aliases expanded (strings: their length, any other
    value: 1), or None when a list or mapping contains itself. A shared value (an alias) is sized
    once (`sizes`: id of a sized list or mapping -> its size, kept across calls), so this takes
    the time of the file, not of the expansion."""
    if not isinstance(root, (dict, list, set)):
        return _scalar_size(root)
    open_: set[int] = set()  # the lists and mappings around the one being sized
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        items = [*node.keys(), *node.values()] if isinstance(node, dict) else node
        if done:
            open_.discard(id(node))
            sizes[id(node)] = 1 + sum(sizes[id(x)] if id(x) in sizes else _scalar_size(x) for x in items)
        elif id(node) in open_:
            return None
        elif id(node) not in sizes:
            open_.add(id(node))
            stack.append((node, True))
            stack.extend((x, False) for x in items if isinstance(x, (dict, list, set)))
    return sizes[id(root)]


def _scalar_size(value) -> int:
    return len(value) if isinstance(value, str) else 1
