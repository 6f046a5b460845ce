"""The name server: route tables and broker liveness (:mod:`namesrv.routeinfo`), KV config
(:mod:`namesrv.kvconfig`), request handlers (:mod:`namesrv.processor`) and the component that
ties them together (:class:`namesrv.controller.NamesrvController`)."""
