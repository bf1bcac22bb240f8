"""The one typed job spec, and the parsers that CLI flags, YAML files and the SDK share.

Everything here is pure: no I/O, no backend knowledge. A spec is a frozen, keyword-only
dataclass validated in ``__post_init__``; a bad value raises :class:`SpecError` naming the
value and the fix.

The modules, each importing only those above it:
  fields.py       the rules every field shares: text, true/false, an image, bounds on numbers
  env.py          -e KEY=VALUE, the variables dtrain owns, the seed's ENABLE_SNAPSHOT
  volumes.py      VolumeMount, NewVolume, mount paths, --pvc
  labels.py       labels, node selection (--node-selector, --node-type), label selectors (-l)
  tolerations.py  Toleration, --toleration
  job.py          JobSpec, its wire form, the SageMaker options' place in it
  notebook.py     a notebook as a job: its command and HOME
  yaml_file.py    a job file or config.yaml read as one checked mapping (beside the rest)
Every name is here too: `from dtrain.spec import X` is how the rest of dtrain imports them.
"""

from __future__ import annotations

from dtrain.errors import SpecError  # noqa: F401
from dtrain.names import (MAX_PROCESSES, MIN_VOLUME, NAME_RE, SIZE_RE, STORED, WrittenFloat,  # noqa: F401
                          WrittenInt, check_mounted_volume, check_name, check_storage_class, cut, job_volume_name,
                          parse_least_size, parse_size, parse_volume_size, plain, shown, written)
from dtrain.numbers import (NUMBER_WORD_RE, NumberWord, Typed, exact, plain_numbers, real_number,  # noqa: F401
                            whole, whole_number, yaml11_form)
from dtrain.spec.env import (ENV_KEY_RE, FALSE_WORDS, OWNED_ENV, SNAPSHOT_ENV, SNAPSHOT_VOLUME_ENV,  # noqa: F401
                             TRUE_WORDS, parse_env)
from dtrain.spec.fields import (IMAGE_RE, MAX_ARGS_ENV, MAX_CPU, MAX_GPU_PER_PROCESS, MAX_IDLE_TIMEOUT,  # noqa: F401
                                MAX_IMAGE_NAME, MAX_RESTARTS, MAX_TEXT, MEMORY_EXAMPLE, MIN_CPU, MIN_IDLE_TIMEOUT,
                                MIN_MEMORY, check_idle_timeout, check_image, idle_timeout_refusal)
from dtrain.spec.job import (FIELD_ALIASES, LAUNCHERS, NUMBER_FIELDS, WHOLE_FIELDS, JobSpec,  # noqa: F401
                             check_sagemaker_mapping, sagemaker_backend)
from dtrain.spec.labels import (LABEL_KEY_RE, LABEL_VALUE_RE, MAX_LABELS, MAX_NODE_SELECTOR,  # noqa: F401
                                MAX_SELECTOR, NODE_TYPE_LABEL, OWNED_LABEL_PREFIXES, SELECTOR_PATTERN, node_labels,
                                parse_labels, parse_node_selector, parse_selector, selects)
from dtrain.spec.notebook import (NOTEBOOK_HOME, NOTEBOOK_SERVER, OUTER_HOME, WORKSPACES_ENV,  # noqa: F401
                                  notebook_home, notebook_spec, outer_home, workspaces_dir)
from dtrain.spec.tolerations import (MAX_TOLERATION_SECONDS, MAX_TOLERATIONS, TAINT_EFFECTS,  # noqa: F401
                                     TOLERATION_EXAMPLE, TOLERATION_FIELDS, Toleration, check_tolerations,
                                     parse_toleration)
from dtrain.spec.volumes import (MAX_MOUNT_PATH, MAX_PATH_PART, RESERVED_MOUNTS, NewVolume, Volume,  # noqa: F401
                                 VolumeMount, parse_pvc)
from dtrain.spec.yaml_file import (MAX_YAML_BYTES, MAX_YAML_EXPANDED, check_yaml_numbers, yaml_mapping,  # noqa: F401
                                   yaml_value)
from dtrain.spec_sagemaker import NUMBER_FIELDS as SAGEMAKER_NUMBERS, SageMakerOptions  # noqa: F401
