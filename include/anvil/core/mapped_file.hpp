// anvil: placeholder, being written.
#pragma once
