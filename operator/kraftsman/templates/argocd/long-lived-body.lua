local ready = condition("Ready")
if ready ~= nil and ready.status == "True" then
  hs.status = "Healthy"
  hs.message = text(ready, "Ready")
  return hs
end
local progressing = condition("Progressing")
if ready ~= nil and ready.status == "False" and
    (progressing == nil or progressing.status ~= "True") then
  hs.status = "Degraded"
  hs.message = ready.reason .. ": " .. text(ready, "not ready")
  return hs
end
hs.status = "Progressing"
hs.message = text(progressing, text(ready, "Reconciling"))
return hs
