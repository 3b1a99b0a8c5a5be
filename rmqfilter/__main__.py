"""``python -m rmqfilter``: the ``rmqfilter`` command."""
import sys

from rmqfilter import main

sys.exit(main())
