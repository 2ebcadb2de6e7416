/** Geometry: a picture letterboxed into the stage, and clicks mapped back through its displayed rect. */

/** The largest whole-pixel size of an ``imageWidth`` x ``imageHeight`` picture that fits the box. */
export function fitSize(boxWidth, boxHeight, imageWidth, imageHeight) {
  const scale = Math.min(boxWidth / imageWidth, boxHeight / imageHeight);
  return {
    width: Math.max(1, Math.floor(imageWidth * scale)),
    height: Math.max(1, Math.floor(imageHeight * scale)),
  };
}

/** A client (CSS px) point as canonical image pixels, through the picture's displayed rectangle. */
export function toCanonical(clientX, clientY, rect, imageWidth, imageHeight) {
  return {
    x: ((clientX - rect.left) / rect.width) * imageWidth,
    y: ((clientY - rect.top) / rect.height) * imageHeight,
  };
}

/** Whether turning the device would show the picture larger: a landscape picture on a portrait screen
 *  of a touch device, where turning it would give the picture at least a quarter more area. */
export function rotateWouldHelp(viewportWidth, viewportHeight, imageWidth, imageHeight, touch) {
  if (!touch || viewportHeight <= viewportWidth || imageWidth <= imageHeight) { return false; }
  const now = fitSize(viewportWidth, viewportHeight, imageWidth, imageHeight);
  const turned = fitSize(viewportHeight, viewportWidth, imageWidth, imageHeight);
  return now.width * now.height < 0.8 * turned.width * turned.height;
}
