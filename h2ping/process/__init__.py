"""The process: flags into settings (:mod:`.cli`, :mod:`.flags`), the running
proxy (:mod:`.proxy`), ``--workers`` (:mod:`.workers`), the admin endpoint with
its metrics and the other workers' numbers (:mod:`.admin`, :mod:`.metrics`,
:mod:`.siblings`), the access log (:mod:`.accesslog`), freed memory back to the
system (:mod:`.heap`) and loop lag (:mod:`.lag`). Nothing below imports it; this
file imports nothing, so a plain proxy loads only the modules it uses."""
