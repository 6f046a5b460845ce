"""The Python client side: admin calls (:mod:`client.admin`) and the ``rmq-admin`` CLI
(:mod:`client.admin_cli`). Depends only on :mod:`remoting`."""
