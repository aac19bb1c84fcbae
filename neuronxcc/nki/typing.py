from nki.typing import *  # noqa: F401,F403
from nki.typing import tensor  # noqa: F401
